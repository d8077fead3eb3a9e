"""Mistake: validation under no_grad() but without model.eval(): Dropout and BatchNorm stay in training mode.

Run: torchwork doctor examples/mistakes/eval_mode.py
"""
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
digits = load_digits()
data = TensorDataset(torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target))
train, val = torch.utils.data.random_split(data, [1500, 297])
train_loader = DataLoader(train, batch_size=64, shuffle=True, drop_last=True)
val_loader = DataLoader(val, batch_size=128)

model = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
for epoch in range(2):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        optimizer.step()
    correct = 0
    with torch.no_grad():  # right, but model.eval() is missing
        for xb, yb in val_loader:
            correct += (model(xb).argmax(1) == yb).sum().item()  # doctor: eval-mode
    print(f"epoch {epoch}: val accuracy {correct / len(val):.3f}")
