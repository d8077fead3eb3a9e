"""Pattern: https://github.com/pytorch/tutorials (beginner_source/basics/optimization_tutorial.py): the
tutorial's train and test loops, written here from scratch (no code taken from it).

Practices exercised: model.train() at the start of the training loop, optimizer.step() followed by
optimizer.zero_grad() (gradients cleared after the step, not before the backward), the loss variable
reused for its .item() when printing, and a test loop under model.eval() + torch.no_grad() summing
loss.item() and correct predictions. scikit-learn's packaged 8x8 digits instead of FashionMNIST.
"""
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(1)
digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
train_loader = DataLoader(TensorDataset(x[:1300], y[:1300]), batch_size=50)
test_loader = DataLoader(TensorDataset(x[1300:], y[1300:]), batch_size=50)
model = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_loop():
    model.train()
    for i, (xb, yb) in enumerate(train_loader):
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if i % 10 == 0:
            loss = loss.item()
            print(f"batch {i}: {loss:.4f}")


def test_loop():
    model.eval()
    total, right = 0.0, 0
    with torch.no_grad():
        for xb, yb in test_loader:
            logits = model(xb)
            total += loss_fn(logits, yb).item()
            right += (logits.argmax(1) == yb).sum().item()
    print(f"accuracy {right / len(test_loader.dataset):.3f}, loss {total / len(test_loader):.4f}")


for epoch in range(3):
    train_loop()
    test_loop()
