"""Correct: deliberate gradient accumulation (4 micro-batches per optimizer step); no finding.

Run: torchwork doctor examples/mistakes/correct_accumulation.py
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
    loss = nn.functional.cross_entropy(model(x[start:start + 16]), y[start:start + 16]) / accumulate
    loss.backward()  # gradients add up on purpose ...
    if (i + 1) % accumulate == 0:
        optimizer.step()
        optimizer.zero_grad()  # ... and are cleared after each step
print(f"last loss {loss.item() * accumulate:.3f}")
