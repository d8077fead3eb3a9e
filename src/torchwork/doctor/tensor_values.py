"""What the doctor reads of a value without changing it: the tensors in a forward's output, and whether a
tensor is finite at the cost of one reduction.

Example:
    >>> import torch
    >>> from torchwork.doctor.tensor_values import is_finite_fast, tensors_in
    >>> len(tensors_in((torch.ones(2), {"aux": torch.zeros(1)}))), is_finite_fast(torch.tensor([1.0, float("nan")]))
    (2, False)
"""

from __future__ import annotations

import math
from typing import Any

import torch

Tensor = torch.Tensor


def first_tensor(value: Any) -> Tensor | None:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], Tensor):
        return value[0]
    return None


def tensors_in(value: Any, limit: int = 16) -> list[Tensor]:
    """The tensors in a forward output: a tensor, or tensors one or two levels inside tuples/lists/dicts."""
    if isinstance(value, Tensor):  # the common case, without the walk
        return [value]
    found: list[Tensor] = []

    def visit(item: Any, depth: int) -> None:
        if len(found) >= limit:
            return
        if isinstance(item, Tensor):
            found.append(item)
        elif depth < 2 and isinstance(item, (tuple, list)):
            for sub in item:
                visit(sub, depth + 1)
        elif depth < 2 and isinstance(item, dict):
            for sub in item.values():
                visit(sub, depth + 1)

    visit(value, 0)
    return found


def is_finite_fast(t: Tensor) -> bool:
    """True when every element is finite. One reduction: a sum is finite only if every element is."""
    if t.numel() == 0 or t.device.type == "meta":
        return True
    if math.isfinite(t.detach().sum().item()):  # item(): a Python float, cheaper than a 0-d isfinite
        return True
    return bool(torch.isfinite(t.detach()).all())  # the sum may overflow on its own: check exactly
