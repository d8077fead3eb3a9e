"""Outdated: nn.DataParallel instead of DistributedDataParallel.

Run: torchwork doctor examples/mistakes/data_parallel.py
"""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.DataParallel(nn.Linear(8, 2))  # doctor: data-parallel
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))
for _ in range(3):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
