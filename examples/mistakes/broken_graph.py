"""Mistake: .detach() inside forward() cuts the encoder off: it never receives a gradient.

Run: torchwork doctor examples/mistakes/broken_graph.py
"""
import torch
from torch import nn

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 32), nn.ReLU())
        self.head = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.encoder(x).detach()  # doctor: broken-graph
        return self.head(features)


x, y = torch.randn(256, 20), torch.randint(0, 2, (256,))
model = Classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for _ in range(20):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.3f} (the encoder never learned)")
