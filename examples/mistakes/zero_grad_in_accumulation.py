"""Mistake: gradient accumulation with zero_grad() inside the micro-batch loop: only the last micro-batch counts.

Run: torchwork doctor examples/mistakes/zero_grad_in_accumulation.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(512, 16), torch.randint(0, 4, (512,))
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
accumulate = 4
for i, start in enumerate(range(0, 512, 16)):
    optimizer.zero_grad()  # doctor: zero-grad-in-accumulation
    loss = nn.functional.cross_entropy(model(x[start:start + 16]), y[start:start + 16]) / accumulate
    loss.backward()
    if (i + 1) % accumulate == 0:
        optimizer.step()
print(f"last loss {loss.item() * accumulate:.3f}")
