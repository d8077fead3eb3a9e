"""Mistake: attention dropout through F.scaled_dot_product_attention and F.dropout stays on after model.eval().

Neither function reads the module's mode: `dropout_p=self.dropout` and `F.dropout(x, p)` (training=True by
default) keep dropping during evaluation, so the validation accuracy changes from run to run.
Run: torchwork doctor examples/mistakes/dropout_in_eval.py
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
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout)  # doctor: dropout-in-eval
        y = self.out(y.transpose(1, 2).reshape(b, t, d))
        return F.dropout(y, 0.1)  # doctor: dropout-in-eval


model = nn.Sequential(nn.Linear(8, 32), SelfAttention(), nn.Flatten(), nn.Linear(32 * 6, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 6, 8), torch.randint(0, 2, (64,))
for _ in range(5):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
model.eval()
with torch.no_grad():
    print("accuracy", (model(x).argmax(1) == y).float().mean().item())
