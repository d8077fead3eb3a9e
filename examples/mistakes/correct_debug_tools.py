"""Correct: anomaly detection only behind a debug flag, and for one suspicious step.

Run: torchwork doctor examples/mistakes/correct_debug_tools.py
"""
import os

import torch
from torch import nn

torch.manual_seed(0)
torch.autograd.set_detect_anomaly(os.environ.get("DEBUG_NAN") == "1")

model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(128, 16)
y = x[:, :4].sum(dim=1, keepdim=True)
with torch.autograd.detect_anomaly():  # one step checked, to see that the gradients are finite
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
for _ in range(10):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
