"""Correct: a compiled model trained on batches of one shape, with no Python on tensor values.

Run:
torchwork doctor examples/mistakes/correct_compiled.py
"""

import torch
from torch import nn

torch.manual_seed(0)
model = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)), backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
