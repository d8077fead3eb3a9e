"""Pattern: https://github.com/udacity/deep-learning-v2-pytorch/issues/3 ("We have dropout in the model ...
why don't we use model.eval() for the validation": the notebooks validate each epoch with dropout still
active and autograd recording). Written here from scratch: an MLP with Dropout on random images.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(10)
mlp = nn.Sequential(nn.Flatten(), nn.Linear(196, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 128), nn.ReLU(),
                    nn.Dropout(0.2), nn.Linear(128, 10))
x, y = torch.randn(120, 1, 14, 14), torch.randint(0, 10, (120,))
train_loader = DataLoader(TensorDataset(x[:80], y[:80]), batch_size=16)
valid_loader = DataLoader(TensorDataset(x[80:], y[80:]), batch_size=20)
loss_fn = nn.CrossEntropyLoss()
sgd = torch.optim.SGD(mlp.parameters(), lr=0.01)
for epoch in range(2):
    train_loss = valid_loss = 0.0
    for xb, yb in train_loader:
        sgd.zero_grad()
        loss = loss_fn(mlp(xb), yb)
        loss.backward()
        sgd.step()
        train_loss += loss.item() * len(xb)
    for xb, yb in valid_loader:
        logits = mlp(xb)  # expect: eval-mode
        valid_loss += loss_fn(logits, yb).item() * len(xb)
    print(epoch, train_loss / 80, valid_loss / 40)
