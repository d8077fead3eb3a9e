"""Correct: fine-tuning with a new head, frozen BatchNorm, a partial strict=False load and masked attention.

The pretrained body is loaded without its head (strict=False, and the returned missing keys are exactly
the head); BatchNorm layers are frozen on purpose after model.train(); the attention masks padding with
-inf before the softmax. None of this is a finding.
Run: torchwork doctor examples/mistakes/correct_finetune.py
"""
import torch
from torch import nn

torch.manual_seed(0)


class Encoder(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.norm = nn.BatchNorm1d(16)
        self.query = nn.Linear(16, 16)
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.norm(self.embed(x).reshape(b * t, 16)).reshape(b, t, 16)
        scores = self.query(h) @ h.transpose(1, 2) / 4.0
        scores = scores.masked_fill(pad[:, None, :], float("-inf"))  # padding gets zero attention
        h = torch.softmax(scores, dim=-1) @ h
        return self.head(h.mean(dim=1))


pretrained = Encoder(classes=10)
body = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("head.")}
model = Encoder(classes=3)
result = model.load_state_dict(body, strict=False)
assert result.missing_keys == ["head.weight", "head.bias"], result.missing_keys

model.train()
model.norm.eval()  # frozen BatchNorm statistics, on purpose
for p in model.norm.parameters():
    p.requires_grad_(False)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
x = torch.randn(32, 6, 8)
pad = torch.zeros(32, 6, dtype=torch.bool)
pad[:, 4:] = True  # the last two positions are padding
y = torch.randint(0, 3, (32,))
for _ in range(15):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x, pad), y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.3f}")
