"""Mistake: the loss is rebuilt from a Python number and "fixed" with requires_grad=True.

The error "element 0 of tensors does not require grad" disappears, but the model gets no gradient.
Run: torchwork doctor examples/mistakes/broken_graph_leaf_loss.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x, y = torch.randn(128, 10), torch.randn(128, 1)
model = nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(10):
    optimizer.zero_grad()
    mse = ((model(x) - y) ** 2).mean().item()  # doctor: broken-graph
    loss = torch.tensor(mse, requires_grad=True)
    loss.backward()  # doctor: broken-graph
    optimizer.step()
print(f"loss {loss.item():.3f} (never changes)")
