"""Note: a training run saved to be resumed, but no seed: a resumed or repeated run cannot match it.

Run: torchwork doctor examples/mistakes/unseeded.py
"""
import io

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
checkpoint = io.BytesIO()  # a file in real code: torch.save(..., "checkpoint.pt")
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1}, checkpoint)
