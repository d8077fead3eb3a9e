"""Per-batch metric functions for ``Trainer(metrics=...)``: each returns the mean over the batch.

Example:
    >>> import torch
    >>> from torchwork.engine.metrics import accuracy
    >>> float(accuracy(torch.tensor([[0.1, 0.9], [0.8, 0.2]]), torch.tensor([1, 1])))
    0.5
"""

from __future__ import annotations

import torch


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Top-1 accuracy of class scores ``outputs`` (N, C) against integer ``targets`` (N,)."""
    return (outputs.argmax(dim=-1) == targets).float().mean()
