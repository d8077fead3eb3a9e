"""Mistake: slow per-sample loading in the main process (num_workers=0): the model waits for data.

Run: torchwork doctor examples/mistakes/data_bound.py
"""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class SlowImages(Dataset):
    """Stands in for decoding image files from disk: ~2 ms per sample."""

    def __len__(self) -> int:
        return 640

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.002)
        return torch.randn(32), index % 4


loader = DataLoader(SlowImages(), batch_size=64, shuffle=True)
model = nn.Linear(32, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:  # doctor: data-bound
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(xb), yb).backward()
    optimizer.step()
