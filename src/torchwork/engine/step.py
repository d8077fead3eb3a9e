"""One optimizer step, top to bottom: the order is the whole point.

zero_grad -> for each micro-batch: move, forward under the precision's autocast, loss weighted by its
share of the window's samples, backward (scaled under fp16) -> unscale -> clip -> optimizer step (skipped
on inf/NaN under a scaler) -> scheduler. Precision lives behind :class:`PrecisionPlan`, gradient sync
behind a :class:`GradSync` (one process: nothing to do; DDP: ``torchwork.distributed.sync``).

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torchwork.engine.precision import resolve_precision
    >>> from torchwork.engine.step import LocalSync, StepSetup, optimizer_step
    >>> model = nn.Linear(3, 1)
    >>> setup = StepSetup(torch.optim.SGD(model.parameters(), lr=0.1), resolve_precision("32", torch.device("cpu")),
    ...                   LocalSync(), loss_of=lambda batch: (((model(batch) - 1) ** 2).mean(), len(batch)),
    ...                   samples_in=len)
    >>> result = optimizer_step(setup, [torch.ones(4, 3), torch.ones(2, 3)])
    >>> result.samples, result.stepped
    (6, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from torchwork.engine.precision import NO_CONTEXT, PrecisionPlan

Tensor = torch.Tensor


class GradSync(Protocol):
    """How gradients of several processes agree: the samples a window averages over, and when to sync."""

    def sample_scale(self, window_samples: int) -> float:
        """The factor that turns a micro-batch's sample count into its weight in the window's mean."""

    def micro_batch(self, final: bool) -> Any:
        """The context one micro-batch's backward runs in (``final``: the window's last one)."""


class LocalSync:
    """One process: the window's mean is over its own samples, and nothing is synchronised."""

    def sample_scale(self, window_samples: int) -> float:
        return 1.0 / window_samples

    def micro_batch(self, final: bool) -> Any:
        return NO_CONTEXT


@dataclass
class StepSetup:
    """What one optimizer step needs. ``loss_of(batch) -> (loss, samples)`` moves the batch and runs the
    forward pass and the loss; ``samples_in(batch)`` counts a batch's samples without running it."""

    optimizer: torch.optim.Optimizer
    precision: PrecisionPlan
    sync: GradSync
    loss_of: Callable[[Any], tuple[Tensor, int]]
    samples_in: Callable[[Any], int]
    clip_grad_norm: float | None = None
    clip_grad_value: float | None = None
    scheduler: Any = None  # stepped once per optimizer step (None: not here, e.g. ReduceLROnPlateau)


@dataclass
class StepResult:
    """``loss``: the window's detached sample mean; ``smallest``: its smallest micro-batch;
    ``grad_norm``: the norm before clipping (when clipping by norm); ``stepped``: False when a GradScaler
    skipped the update."""

    loss: Tensor
    samples: int
    smallest: int
    grad_norm: Tensor | None
    stepped: bool


def optimizer_step(setup: StepSetup, window: Sequence[Any]) -> StepResult:
    """One optimizer step over the micro-batches of ``window``, accumulated exactly (Composer-style: each
    micro-batch weighs its share of the samples, so a short last window averages over its own samples)."""
    optimizer, precision = setup.optimizer, setup.precision
    optimizer.zero_grad(set_to_none=True)  # frees the gradients instead of zero-filling them
    accumulating = len(window) > 1
    counts = [setup.samples_in(batch) for batch in window] if accumulating else None
    scale = setup.sync.sample_scale(sum(counts)) if counts else 1.0
    window_loss = None
    # fp32 on one process has no context to enter; entering no-op ones would cost 4 Python calls a step
    plain = precision.dtype is None and type(setup.sync) is LocalSync
    for index, batch in enumerate(window):
        if plain:
            loss, samples = setup.loss_of(batch)
            precision.backward(loss if counts is None else loss * (counts[index] * scale))
        else:
            with setup.sync.micro_batch(final=index == len(window) - 1):  # DDP all-reduces on the last one
                with precision.autocast():
                    loss, samples = setup.loss_of(batch)
                precision.backward(loss if counts is None else loss * (counts[index] * scale))
        loss = loss.detach()
        if counts is None:
            window_loss = loss
        else:
            window_loss = loss * counts[index] if window_loss is None else window_loss + loss * counts[index]
    assert window_loss is not None  # a window holds at least one micro-batch
    if counts is not None:
        samples = sum(counts)
        window_loss = window_loss / samples  # the local sample mean, for logging

    precision.unscale(optimizer)  # clip and log the true gradients, not the scaled ones
    grad_norm = None
    if setup.clip_grad_norm is not None or setup.clip_grad_value is not None:
        # Read from the optimizer at each step: groups added during training (gradual unfreezing) count too.
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if setup.clip_grad_norm is not None:  # returns the norm before clipping: the one worth logging
            grad_norm = torch.nn.utils.clip_grad_norm_(params, setup.clip_grad_norm)
        if setup.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(params, setup.clip_grad_value)
    stepped = precision.step(optimizer)  # fp16: skipped when the gradients hold inf/NaN
    if stepped and setup.scheduler is not None:
        setup.scheduler.step()  # counts optimizer steps, never micro-batches
    return StepResult(window_loss, samples, min(counts) if counts else samples, grad_norm, stepped)
