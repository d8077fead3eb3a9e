"""Mistake: the optimizer steps without zero_grad(), so every update uses the sum of all past gradients.

Run: torchwork doctor examples/mistakes/missing_zero_grad.py
"""
import torch
from sklearn.datasets import load_digits
from torch import nn

torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.data[:512] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target[:512])

model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(2):
    for i in range(0, len(x), 64):
        loss = loss_fn(model(x[i:i + 64]), y[i:i + 64])
        loss.backward()  # gradients add up in .grad ...
        optimizer.step()  # doctor: missing-zero-grad
    print(f"epoch {epoch}: loss {loss.item():.3f}")
