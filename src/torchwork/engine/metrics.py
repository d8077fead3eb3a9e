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


def macro_f1(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Unweighted mean of per-class F1 (an epoch metric: pass it in ``epoch_metrics``).

    Every class counts the same however rare it is, so a model that ignores a small class scores low.

    Example:
        >>> round(macro_f1(torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([0, 1])), 4)
        0.3333
    """
    predictions = outputs.argmax(dim=-1)
    classes = int(max(outputs.shape[-1], int(targets.max()) + 1))
    scores = []
    for c in range(classes):
        tp = int(((predictions == c) & (targets == c)).sum())
        fp = int(((predictions == c) & (targets != c)).sum())
        fn = int(((predictions != c) & (targets == c)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return sum(scores) / len(scores)
