"""Mistake: anomaly detection, switched on to hunt a NaN once, left on for the whole training run.

Run: torchwork doctor examples/mistakes/anomaly_mode.py
"""
import torch
from torch import nn

torch.manual_seed(0)
torch.autograd.set_detect_anomaly(True)  # doctor: anomaly-mode

model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(128, 16)
y = x[:, :4].sum(dim=1, keepdim=True)
for _ in range(10):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
