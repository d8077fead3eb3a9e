"""Mistake: a compiled forward branches on `.item()`: torch.compile breaks the graph on that line at every
call, so nothing fuses across it.

backend="eager" keeps the example quick; the guards, recompiles and graph breaks are Dynamo's with any backend.
Run:
torchwork doctor examples/mistakes/graph_breaks.py
"""

import torch
from torch import nn


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if h.mean().item() > 100.0:  # doctor: graph-breaks
            h = h * 0.5
        return self.b(h)


torch.manual_seed(0)
model = torch.compile(Gated(), backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
