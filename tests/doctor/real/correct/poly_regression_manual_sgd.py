"""Pattern: https://github.com/pytorch/examples (regression/main.py): polynomial regression updated by
hand, written here from scratch (no code taken from it).

Practices exercised: features x, x^2, x^3, x^4 built with torch.cat of powers, a target computed with a
Python number from .item(), module.zero_grad() before each backward, the loss read with .item() before
backward, a hand-written SGD update through param.data (no optimizer at all), and an endless
itertools.count loop that stops on a threshold or a cap.
"""
import itertools

import torch
from torch.nn import functional as F

torch.manual_seed(8)
DEGREE = 4
true_w, true_b = torch.randn(DEGREE, 1) * 3, torch.randn(1) * 3


def powers(x):
    return torch.cat([x[:, None] ** k for k in range(1, DEGREE + 1)], dim=1)


def sample(n=32):
    features = powers(torch.randn(n))
    return features, features @ true_w + true_b.item()


layer = torch.nn.Linear(DEGREE, 1)
for batch in itertools.count(1):
    x, y = sample()
    layer.zero_grad()
    loss = F.smooth_l1_loss(layer(x), y)
    value = loss.item()
    loss.backward()
    for param in layer.parameters():
        param.data.add_(param.grad, alpha=-0.05)
    if value < 1e-3 or batch >= 250:
        break
print(f"loss {value:.5f} after {batch} batches")
