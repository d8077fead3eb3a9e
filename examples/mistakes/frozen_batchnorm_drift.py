"""Mistake: a pretrained body is frozen with requires_grad_(False), but model.train() leaves its BatchNorm
in training mode, so every forward pass moves its running statistics toward the new data.

Run: torchwork doctor examples/mistakes/frozen_batchnorm_drift.py
"""
import torch
from sklearn.datasets import load_digits
from torch import nn

torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.data[:512] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target[:512])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 32)
        self.bn = nn.BatchNorm1d(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.fc(x)))  # doctor: frozen-batchnorm-drift
        return self.head(h)


model = Net()
model.fc.requires_grad_(False)
model.bn.requires_grad_(False)  # "frozen": its weights are, its running statistics are not
optimizer = torch.optim.AdamW(model.head.parameters(), lr=1e-2)
for epoch in range(2):
    model.train()
    for i in range(0, len(x), 64):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.3f}")
