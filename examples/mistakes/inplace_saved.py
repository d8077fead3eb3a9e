"""Mistake: an in-place += on the output of sigmoid, which autograd saved to compute sigmoid's gradient.

Run: torchwork doctor examples/mistakes/inplace_saved.py
"""
import torch
from torch import nn

torch.manual_seed(0)


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.proj(x))
        gate += 0.1  # doctor: inplace-saved
        return gate * x


model = nn.Sequential(Gate(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8), torch.randn(32, 1)
optimizer.zero_grad()
loss = nn.functional.mse_loss(model(x), y)
loss.backward()
optimizer.step()
