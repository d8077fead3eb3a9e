"""Mistake: 129 samples with batch_size=64 and drop_last=False: the last batch has one sample.

Run: torchwork doctor examples/mistakes/batchnorm_single_sample.py
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 32)
        self.bn = nn.BatchNorm1d(32)
        self.out = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.fc(x))
        return self.out(torch.relu(x))


loader = DataLoader(TensorDataset(torch.randn(129, 12), torch.randint(0, 2, (129,))), batch_size=64)  # doctor: batchnorm-single-sample
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(xb), yb).backward()
    optimizer.step()
