"""When the Trainer steps a learning-rate scheduler: after every optimizer step, or once per epoch.

A scheduler counts whatever it is stepped on. ``StepLR(step_size=1, gamma=0.7)`` written for a loop that
steps it once per epoch decays the learning rate 0.7x per *batch* when stepped per step: after one epoch of
938 MNIST batches the rate is 0.7^938 of what was meant. ``scheduler_interval="auto"`` reads what the
scheduler counts from what it is:

- ``OneCycleLR`` and ``CyclicLR`` are sized in steps (``total_steps``, ``step_size_up``): per step;
- a scheduler with a horizon (``StepLR``'s ``step_size``, ``MultiStepLR``'s last milestone,
  ``CosineAnnealingLR``'s ``T_max``, ``CosineAnnealingWarmRestarts``' ``T_0``, ``LinearLR``'s,
  ``ConstantLR``'s and ``PolynomialLR``'s ``total_iters``): per epoch when the horizon fits in the run's
  epochs, per step when it is longer than the run's epochs (it can only be counting steps);
- ``ExponentialLR`` (a factor per call, no horizon): per epoch, as PyTorch's documentation steps it;
- ``LambdaLR`` and ``MultiplicativeLR`` (a function of the count): per step, the Trainer's behaviour before
  this choice existed; say ``scheduler_interval="epoch"`` when the function counts epochs;
- ``SequentialLR`` and ``ChainedScheduler``: what their schedulers agree on (per step when they do not);
- ``ReduceLROnPlateau``: once per epoch, on the validation metric (``plateau_monitor``).

Example:
    >>> import torch
    >>> optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
    >>> plan = scheduler_interval(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1), epochs=14,
    ...                           steps_per_epoch=938)
    >>> plan.interval, plan.reason
    ('epoch', "StepLR's step_size=1 fits in the run's 14 epochs: counted in epochs")
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torchwork.errors import ConfigError

INTERVALS = ("auto", "step", "epoch")
_STEP_SIZED = ("OneCycleLR", "CyclicLR")
_PER_EPOCH = ("ExponentialLR",)
_CHAINS = ("SequentialLR", "ChainedScheduler")


@dataclasses.dataclass(frozen=True)
class SchedulePlan:
    """``interval``: ``"step"``, ``"epoch"`` or ``"plateau"`` (per epoch, on a metric); ``reason``: why."""

    interval: str
    reason: str


def check_interval(value: Any) -> str:
    """``value`` if it is one of :data:`INTERVALS`, else a ConfigError."""
    if value not in INTERVALS:
        raise ConfigError(f"scheduler_interval={value!r}: use 'auto' (chosen from the scheduler), 'step' (after "
                          "every optimizer step) or 'epoch' (once per epoch).")
    return str(value)


def horizon(scheduler: Any) -> tuple[str, int] | None:
    """The setting that says how many calls the schedule lasts, and its value, where it has one (the
    doctor's ``scheduler-per-batch`` reads it too).

    Example:
        >>> import torch
        >>> optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        >>> horizon(torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[3, 8]))
        ('milestones', 8)
    """
    name = type(scheduler).__name__
    if name == "StepLR":
        return "step_size", int(scheduler.step_size)
    if name == "MultiStepLR":
        return "milestones", max(scheduler.milestones, default=0)
    if name == "CosineAnnealingLR":
        return "T_max", int(scheduler.T_max)
    if name == "CosineAnnealingWarmRestarts":
        return "T_0", int(scheduler.T_0)
    if name in ("LinearLR", "ConstantLR", "PolynomialLR"):
        return "total_iters", int(scheduler.total_iters)
    return None


def _auto(scheduler: Any, epochs: int | None, steps_per_epoch: int | None) -> SchedulePlan:
    name = type(scheduler).__name__
    if name in _STEP_SIZED:
        return SchedulePlan("step", f"{name} is sized in optimizer steps")
    if name in _PER_EPOCH:
        return SchedulePlan("epoch", f"{name} multiplies the rate at every call and has no length: once per epoch, "
                                     "as PyTorch's documentation steps it")
    if name in _CHAINS:
        children = [_auto(s, epochs, steps_per_epoch) for s in getattr(scheduler, "_schedulers", [])]
        kinds = {c.interval for c in children}
        if len(kinds) == 1:
            return SchedulePlan(kinds.pop(), f"{name}: its schedulers agree (" + "; ".join(c.reason for c in children)
                                + ")")
        return SchedulePlan("step", f"{name}: its schedulers disagree, stepped per step as before; say "
                                    "scheduler_interval='epoch' if it counts epochs")
    length_setting = horizon(scheduler)
    if length_setting is None:
        return SchedulePlan("step", f"{name} is a function of its count: stepped per step (the Trainer's default "
                                    "before this choice); say scheduler_interval='epoch' if it counts epochs")
    field, length = length_setting
    if epochs is None or length <= epochs:
        where = f"the run's {epochs} epochs" if epochs is not None else "a run of epochs"
        return SchedulePlan("epoch", f"{name}'s {field}={length} fits in {where}: counted in epochs")
    per_epoch = f" of {steps_per_epoch} steps" if steps_per_epoch else ""
    return SchedulePlan("step", f"{name}'s {field}={length} is longer than the run's {epochs} epochs{per_epoch}: "
                                "counted in steps")


def scheduler_interval(scheduler: Any, asked: str = "auto", *, epochs: int | None = None,
                       steps_per_epoch: int | None = None) -> SchedulePlan:
    """When to step ``scheduler`` (see the module): as ``asked``, or, for ``"auto"``, from what it is and
    the run's ``epochs`` and ``steps_per_epoch``."""
    check_interval(asked)
    name = type(scheduler).__name__
    if name == "ReduceLROnPlateau":
        if asked == "step":
            raise ConfigError("scheduler_interval='step' with ReduceLROnPlateau: it steps on a validation "
                              "metric, once per epoch. Leave scheduler_interval at 'auto' or 'epoch'.")
        return SchedulePlan("plateau", "ReduceLROnPlateau steps on the validation metric once per epoch")
    if asked != "auto":
        return SchedulePlan(asked, f"scheduler_interval={asked!r} as asked")
    return _auto(scheduler, epochs, steps_per_epoch)
