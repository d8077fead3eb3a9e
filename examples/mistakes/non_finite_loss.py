"""Mistake: a hand-written binary cross-entropy takes log(1 - sigmoid(z)); sigmoid saturates to 1 and the loss is inf.

Run: torchwork doctor examples/mistakes/non_finite_loss.py
"""
import math

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(256, 8) * 30  # unnormalised features: large logits
y = (x[:, 0] > 0).float()
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    optimizer.zero_grad()
    p = torch.sigmoid(model(x)).squeeze(1)
    loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()  # doctor: non-finite-loss
    loss.backward()
    if not math.isfinite(loss.item()):
        print(f"step {step}: loss is {loss.item()}, stopping")
        break
    optimizer.step()
