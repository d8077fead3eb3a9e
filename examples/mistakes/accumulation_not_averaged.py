"""Mistake: gradient accumulation that adds up the micro-batches' mean losses: each step gets 4x the gradient.

Run: torchwork doctor examples/mistakes/accumulation_not_averaged.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(512, 16), torch.randint(0, 4, (512,))
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
accumulate = 4
optimizer.zero_grad()
for i, start in enumerate(range(0, 512, 16)):
    loss = nn.functional.cross_entropy(model(x[start:start + 16]), y[start:start + 16])
    loss.backward()  # doctor: accumulation-not-averaged
    if (i + 1) % accumulate == 0:
        optimizer.step()
        optimizer.zero_grad()
print(f"last loss {loss.item():.3f}")
