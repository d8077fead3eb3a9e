"""Mistake: a Dropout built with inplace=True overwrites a sigmoid's output, which backward needs.

The fix belongs where the layer is built (`inplace=True` in __init__), not in forward.
Run: torchwork doctor examples/mistakes/inplace_layer.py
"""
import torch
from torch import nn

torch.manual_seed(0)


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1, inplace=True)  # doctor: inplace-saved

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.proj(x))
        return self.drop(gate) * x


model = nn.Sequential(Gate(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8), torch.randn(32, 1)
optimizer.zero_grad()
loss = nn.functional.mse_loss(model(x), y)
loss.backward()
optimizer.step()
