"""A small Trainer and its batches, shared by the engine's unit tests (test_options.py, test_checkpoint.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchwork import Trainer


def batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(n)]


def small_trainer(**options: Any) -> Trainer:
    """A regression MLP with dropout (an RNG stream to resume) and a StepLR schedule, on the CPU."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5)
    if "logging" not in options:
        options["progress"] = False
    return Trainer(model, optimizer, nn.MSELoss(), scheduler, device="cpu", **options)
