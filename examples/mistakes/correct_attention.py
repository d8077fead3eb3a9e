"""Correct: functional dropout that follows the module's mode, and evaluation after model.eval().

`dropout_p=self.dropout if self.training else 0.0` and `F.dropout(x, p, training=self.training)`; the
attention weights of an evaluation pass are the same every time. Monte Carlo dropout, kept on at
inference on purpose, spells `training=True` out.
Run: torchwork doctor examples/mistakes/correct_attention.py
"""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)


class SelfAttention(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        y = self.out(y.transpose(1, 2).reshape(b, t, d))
        return F.dropout(y, 0.1, training=self.training)


class MCHead(nn.Module):
    """Monte Carlo dropout: sampled at inference on purpose."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32 * 6, 2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc(F.dropout(h, 0.2, training=True))


model = nn.Sequential(nn.Linear(8, 32), SelfAttention(), nn.Flatten(), nn.Linear(32 * 6, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 6, 8), torch.randint(0, 2, (64,))
for _epoch in range(3):
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        print("accuracy", (model(x).argmax(1) == y).float().mean().item())
head = MCHead().eval()
with torch.no_grad():
    samples = torch.stack([head(torch.randn(4, 32 * 6)) for _ in range(8)])
print("MC dropout spread", samples.std(0).mean().item())
