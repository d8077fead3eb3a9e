"""Note: a correct training loop, but no seed: no two runs give the same result.

Run: torchwork doctor examples/mistakes/unseeded.py
"""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))  # doctor: unseeded
x = torch.randn(64, 8)
y = x.sum(dim=1, keepdim=True)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(20):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
