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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from torch import nn

from torchwork.engine.batches import call_model, split_error
from torchwork.engine.devices import batch_size_of, move_to_device
from torchwork.engine.precision import NO_CONTEXT, PrecisionPlan
from torchwork.errors import LossError

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


# ------------------------------------------------------------------ one micro-batch: forward and loss
class ForwardLoss:
    """One micro-batch's forward pass and loss, checked: what :class:`StepSetup`'s ``loss_of`` runs.

    Moves the batch to ``device`` (a tensor already there is not moved), runs ``loss_fn(model(inputs),
    targets)`` or ``step_fn(model, batch)``, combines a dict of named losses with ``loss_weights`` (each
    term kept in :attr:`terms` for logging), and refuses a loss that backward cannot use, saying why.
    ``model`` is what the step calls: the module, its DDP wrapper or its compiled form.
    """

    def __init__(self, model: nn.Module, device: torch.device, loss_fn: Callable[..., Any] | None,
                 step_fn: Callable[..., Any] | None, loss_weights: Mapping[str, float] | None = None) -> None:
        self.model, self.device, self.loss_fn, self.step_fn = model, device, loss_fn, step_fn
        self.loss_weights = loss_weights or {}
        self.non_blocking = device.type == "cuda"
        self.terms: dict[str, Tensor] | None = None
        self._checked_first_batch = False

    def __call__(self, batch: Any) -> tuple[Tensor, int]:
        if not self._checked_first_batch:  # once: what the loader yields has the shape the step expects
            if self.step_fn is None and (not isinstance(batch, (tuple, list)) or len(batch) != 2):
                raise split_error(batch)
            self._checked_first_batch = True
        loss, samples, _, _ = self.forward(self.model, batch)
        if type(loss) is not Tensor or loss.ndim != 0:
            loss, terms = self.combine(loss)
            if terms is not None:
                self.terms = terms
        if not loss.requires_grad:
            raise LossError(
                "the loss does not require grad, so backward() has nothing to do. It was computed under "
                "torch.no_grad()/inference_mode, from .detach()/.item()/.data values, or the model has no "
                "trainable parameters. Setting loss.requires_grad = True only hides the break: find it "
                "(`torchwork doctor` names the line).")
        return loss, samples

    def forward(self, model: Callable[..., Any], batch: Any) -> tuple[Any, int, Any, Any]:
        """``(loss as returned, samples, outputs, targets)`` of one batch moved to the device, through
        ``model``: the training step's path, and evaluation's (with the plain module, in eval mode).
        ``outputs`` and ``targets`` are None under a ``step_fn``."""
        if self.step_fn is not None:
            batch = move_to_device(batch, self.device)
            return self.step_fn(model, batch), batch_size_of(batch) or 1, None, None
        inputs, targets = batch
        device = self.device
        # A tensor already there is not moved: each .to() call costs a GIL release and re-acquire
        if isinstance(inputs, Tensor):
            if inputs.device != device:
                inputs = inputs.to(device, non_blocking=self.non_blocking)
        else:
            inputs = move_to_device(inputs, device)
        if isinstance(targets, Tensor):
            if targets.device != device:
                targets = targets.to(device, non_blocking=self.non_blocking)
            samples = targets.shape[0] if targets.ndim else 1
        else:
            targets = move_to_device(targets, device)
            samples = batch_size_of(targets) or batch_size_of(inputs) or 1
        assert self.loss_fn is not None  # the Trainer requires it when there is no step_fn
        outputs = model(inputs) if type(inputs) is Tensor else call_model(model, inputs)
        return self.loss_fn(outputs, targets), samples, outputs, targets

    def samples_in(self, batch: Any) -> int:
        """A batch's sample count, without running it (the weights of an accumulation window)."""
        if self.step_fn is None and isinstance(batch, (tuple, list)) and len(batch) == 2:
            return batch_size_of(batch[1]) or batch_size_of(batch[0]) or 1
        return batch_size_of(batch) or 1

    def combine(self, loss: Any) -> tuple[Tensor, dict[str, Tensor] | None]:
        """The loss as one scalar tensor, checked, and its detached named terms (None for a plain loss): a
        dict of named losses becomes their sum weighted by ``loss_weights``."""
        if isinstance(loss, Mapping):
            if not loss:
                raise LossError("loss_fn returned an empty dict: return at least one named loss.")
            weights = self.loss_weights
            unknown = set(weights) - set(loss)
            if unknown:
                raise LossError(f"loss_weights names {sorted(unknown)}, but loss_fn returned only "
                                f"{sorted(loss)}. Fix the names in loss_weights.")
            terms = {name: scalar_loss(value, f"loss term {name!r}") for name, value in loss.items()}
            total = cast(Tensor, sum(weights.get(name, 1.0) * value for name, value in terms.items()))
            return total, {name: value.detach() for name, value in terms.items()}
        return scalar_loss(loss, "the loss"), None


def scalar_loss(value: Any, what: str) -> Tensor:
    """``value`` if it is a 0-dim tensor backward can start from, else a :class:`LossError` saying why."""
    if not isinstance(value, Tensor):
        raise LossError(f"{what} is a {type(value).__name__}, not a tensor: return the tensor itself "
                        "(not loss.item()) so that backward() can reach the model.")
    if value.ndim != 0:
        raise LossError(
            f"{what} has shape {tuple(value.shape)}; backward() needs a scalar. Reduce it (e.g. "
            "reduction='mean' in the loss, or .mean()) so that gradients do not depend on batch size.")
    return value
