"""Mistake: the body is unfrozen for stage 2, but the optimizer was built from the head alone, so the
body's gradients are computed every step and never applied.

Run: torchwork doctor examples/mistakes/not_in_optimizer.py
"""
import torch
from sklearn.datasets import load_digits
from torch import nn

torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.data[:512] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target[:512])

body = nn.Sequential(nn.Linear(64, 32), nn.ReLU())
head = nn.Linear(32, 10)
model = nn.Sequential(body, head)
body.requires_grad_(False)  # stage 1: train the head only
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(3):
    if epoch == 1:
        body.requires_grad_(True)  # stage 2: unfrozen, but never added to the optimizer
    for i in range(0, len(x), 64):
        optimizer.zero_grad()
        loss = loss_fn(model(x[i:i + 64]), y[i:i + 64])
        loss.backward()
        optimizer.step()  # doctor: not-in-optimizer
    print(f"epoch {epoch}: loss {loss.item():.3f}")
