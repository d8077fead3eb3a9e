"""Mistake: unnormalised features and a learning rate that is too high: the gradient norm explodes.

Run: torchwork doctor examples/mistakes/exploding_gradients.py
"""
import torch
from torch import nn

torch.manual_seed(0)
x = torch.rand(256, 4) * torch.tensor([1.0, 10.0, 100.0, 5.0])  # features on very different scales
y = x @ torch.tensor([[0.5], [-1.0], [0.02], [2.0]]) + 3.0
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=2e-3)
for step in range(12):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()  # doctor: exploding-gradients
    print(f"step {step}: loss {loss.item():.3g}")
