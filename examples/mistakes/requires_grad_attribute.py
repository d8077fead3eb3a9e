"""Mistake: `module.requires_grad = False` sets an attribute on the module; its parameters keep training.

Run: torchwork doctor examples/mistakes/requires_grad_attribute.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(256, 16), torch.randint(0, 3, (256,))
backbone = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
head = nn.Linear(32, 3)
backbone.requires_grad = False  # doctor: requires-grad-attribute
model = nn.Sequential(backbone, head)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(5):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
