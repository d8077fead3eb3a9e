"""Mistake: `total_loss += loss` keeps the autograd graph of every step alive (memory grows each step).

The PyTorch FAQ's first answer to "my model reports CUDA out of memory". Run:
torchwork doctor examples/mistakes/graph_kept_alive.py
"""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
total_loss = 0
for _ in range(20):
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    total_loss += loss  # doctor: graph-kept-alive
print(f"mean loss {total_loss.item() / 20:.3f}")
