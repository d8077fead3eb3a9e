"""Mistake: fp16 autocast with unnormalised targets and a summed loss: every step overflows, the scale collapses.

GradScaler skips each step with inf gradients and halves its scale; here that never stops.
Run: torchwork doctor examples/mistakes/amp_scale_collapse.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(64, 32) * 1000  # raw sensor values
y = torch.randn(64, 1) * 1000
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
scaler = torch.amp.GradScaler("cpu")
for _ in range(20):
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.mse_loss(model(x).float(), y, reduction="sum")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()  # doctor: amp-scale-collapse
print(f"scale after 20 steps: {scaler.get_scale()}")
