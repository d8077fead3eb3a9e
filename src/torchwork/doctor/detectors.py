"""The detectors that guard mode and ``torchwork doctor`` share: one implementation, one set of thresholds.

Example:
    >>> from torchwork.doctor.detectors import GradNormWatch, scale_collapse
    >>> watch = GradNormWatch()
    >>> [watch.verdict(n, step) for step, n in enumerate([1.0, 1.0, 1.0], start=1)]
    [None, None, None]
    >>> watch.verdict(5e3, 4)
    'The gradient norm grew to 5e+03 at step 4, 5000x its value at the start (1).'
    >>> scale_collapse(minimum=0.5, initial=16.0, updates=5, skipped=5)
    "GradScaler's scale collapsed from 16 to 0.5"
"""

from __future__ import annotations

import math
import statistics

import torch

MAX_GRAD_NORM = 1e5  # a total gradient norm this large is exploding whatever the start
GROWTH = 1e3  # growth over the first steps' median that counts as exploding
EARLY_NORMS = 5  # the first finite norms that make the baseline (their median; 3 at least)
MIN_SCALE = 1.0  # below 1 the GradScaler shrinks gradients instead of protecting them
MIN_UPDATES = 10  # scaler updates before "most steps skipped" is judged
MAX_SKIPPED = 0.5  # share of skipped steps that counts as collapse


def total_grad_norm(params: list[torch.Tensor]) -> torch.Tensor | None:
    """Total L2 norm of the gradients of ``params`` as a tensor (no sync), None when none has one."""
    grads = [p.grad for p in params if p.grad is not None and not p.grad.is_sparse]
    if not grads:
        return None
    norms = torch._foreach_norm(grads)
    return torch.linalg.vector_norm(torch.stack([n.float().to(norms[0].device) for n in norms]))


class GradNormWatch:
    """Exploding gradients: a non-finite total norm, one above ``absolute``, or ``growth`` times the
    median of the first finite norms. With ``absolute_over_start`` > 0, a norm above ``absolute`` counts only
    once it is also that many times the start's median: a loss summed over many elements (``reduction='sum'``)
    starts and stays at a large norm, which a small learning rate or an adaptive optimizer expects."""

    def __init__(self, absolute: float = MAX_GRAD_NORM, growth: float = GROWTH,
                 absolute_over_start: float = 0.0) -> None:
        self.absolute, self.growth, self.absolute_over_start = absolute, growth, absolute_over_start
        self.early: list[float] = []

    def verdict(self, norm: float, step: int, unit: str = "step") -> str | None:
        """None when ``norm`` at ``step`` is healthy, else what is wrong (one sentence)."""
        if len(self.early) < EARLY_NORMS and math.isfinite(norm) and norm > 0:
            self.early.append(norm)
        baseline = statistics.median(self.early) if len(self.early) >= 3 else None
        if not math.isfinite(norm):
            return f"The gradient norm was {norm} at {unit} {step}: some gradients are NaN/Inf."
        above_start = not self.absolute_over_start or (baseline is not None
                                                       and norm > self.absolute_over_start * baseline)
        if norm > self.absolute and above_start:
            return (f"The gradient norm reached {norm:.3g} at {unit} {step}"
                    + (f" (typical at the start: {baseline:.3g})." if baseline else "."))
        if baseline and norm > self.growth * baseline and norm > 10:
            return (f"The gradient norm grew to {norm:.3g} at {unit} {step}, {norm / baseline:.0f}x its value "
                    f"at the start ({baseline:.3g}).")
        return None


def scale_collapse(minimum: float, initial: float, updates: int, skipped: int) -> str | None:
    """None when a GradScaler is healthy, else what went wrong: its scale fell below ``MIN_SCALE``, or more
    than ``MAX_SKIPPED`` of at least ``MIN_UPDATES`` steps were skipped for inf/NaN gradients."""
    if minimum < MIN_SCALE:
        return f"GradScaler's scale collapsed from {initial:g} to {minimum:g}"
    if updates >= MIN_UPDATES and skipped > MAX_SKIPPED * updates:
        return "GradScaler skipped most optimizer steps"
    return None
