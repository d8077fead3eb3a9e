"""Guard mode: the doctor's cheap checks, always on inside a training loop.

A :class:`Guard` watches one model and optimizer (and GradScaler) and is told about each optimizer step;
it costs a few microseconds per step: no hooks, no per-operation instrumentation. It catches
``non-finite-loss``, ``exploding-gradients``, ``batchnorm-single-sample``, ``train-mode``,
``amp-scale-collapse`` and (when told that evaluation starts) ``eval-mode``. ``missing-zero-grad`` cannot
happen in the engine, which zeroes gradients itself. Each new finding is emitted once as a
:class:`DoctorWarning` and kept in ``guard.findings``.

Two ways to attach it, one path:

* in your own loop: call ``guard.after_step(loss, batch_size=..., grad_norm=..., skipped=...)`` after
  each optimizer step, before the next ``zero_grad``;
* as a callback (what ``Trainer(guard=True)`` does, or ``callbacks=[Guard()]``): the Trainer's
  ``on_step_end`` hands it the step's loss, grad norm, skip flag and smallest micro-batch as they are
  (tensors), and it calls ``after_step``. Nothing is read from the device until the checks run together,
  every ``check_every`` steps (the Trainer's ``log_every_n_steps`` by default, so that only logging steps
  sync).

Its detectors and thresholds are the doctor's (:mod:`torchwork.doctor.detectors`).

Example:
    >>> import torch, warnings
    >>> from torch import nn
    >>> from torchwork.doctor.guard import Guard
    >>> model = nn.Linear(4, 1)
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> guard = Guard(model, optimizer)
    >>> with warnings.catch_warnings(record=True):
    ...     guard.after_step(torch.tensor(float("nan")), batch_size=8)
    ...     guard.flush()  # after_step checks every check_every steps; flush checks now
    >>> [f.id for f in guard.findings]
    ['non-finite-loss']
"""

from __future__ import annotations

import math
import sys
import types
import warnings
from typing import Any

import torch
from torch import nn

from torchwork.doctor.detectors import GROWTH, MAX_GRAD_NORM, GradNormWatch, scale_collapse, total_grad_norm
from torchwork.doctor.findings import Finding, Locator, display_path, format_report

Tensor = torch.Tensor

_BATCHNORM = nn.modules.batchnorm._BatchNorm
_STOCHASTIC = (nn.modules.dropout._DropoutNd, _BATCHNORM)


class DoctorWarning(UserWarning):
    """A training-health problem found by the guard (also kept in ``Guard.findings``)."""


MAX_CHECK_EVERY = 2**40  # steps between checks: past any run's length (2.5 was taken, and NaN never checked)


def _checked_options(check_every: Any, max_grad_norm: Any, growth: Any, warn: Any) -> tuple[int | None, float,
                                                                                             float, bool]:
    """The Guard's settings, each refused with what it is when it is no such setting (before any step)."""
    from torchwork.arguments import check_flag
    from torchwork.errors import ConfigError
    from torchwork.finite import is_count, is_finite_number
    from torchwork.quoting import quote_value

    if check_every is not None and not is_count(check_every, 1, MAX_CHECK_EVERY):
        raise ConfigError(f"Guard(check_every={quote_value(check_every)}): use an integer from 1 to "
                          f"{MAX_CHECK_EVERY} (steps between the checks), or None for the default.")
    if not (is_finite_number(max_grad_norm) and max_grad_norm > 0):
        raise ConfigError(f"Guard(max_grad_norm={quote_value(max_grad_norm)}): a gradient norm, a finite number "
                          f"above 0 (default {MAX_GRAD_NORM:g}).")
    if not (is_finite_number(growth) and growth > 1):
        raise ConfigError(f"Guard(growth={quote_value(growth)}): how many times the first steps' median norm "
                          f"counts as exploding, a finite number above 1 (default {GROWTH:g}; 1 or less flags "
                          "every ordinary step).")
    return (None if check_every is None else int(check_every), float(max_grad_norm), float(growth),
            check_flag(warn, "Guard(warn)"))


class Guard:
    """Cheap per-step checks of a training loop.

    Args:
        model, optimizer, scaler: what to watch (``attach_guard(trainer)`` or ``on_fit_start`` fills them).
        check_every: the checks run together every this many steps (one device sync at most); the step
            of a non-finite loss is still exact. The gradient norm is computed then, unless the loop
            passes the norm it already has (e.g. from clipping). Default: the Trainer's
            ``log_every_n_steps`` when attached to one, else 20.
        max_grad_norm: a gradient norm above this is exploding whatever the start.
        growth: a gradient norm this many times its median over the first checks is exploding.
        warn: emit each new finding as a DoctorWarning.
    """

    def __init__(self, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None, *,
                 scaler: Any = None, check_every: int | None = None, max_grad_norm: float = MAX_GRAD_NORM,
                 growth: float = GROWTH, warn: bool = True) -> None:
        check_every, max_grad_norm, growth, warn = _checked_options(check_every, max_grad_norm, growth, warn)
        self._check_every_given = check_every is not None
        self.check_every = check_every if check_every is not None else 20
        self.max_grad_norm, self.growth, self.warn = max_grad_norm, growth, warn
        self._norms = GradNormWatch(max_grad_norm, growth)
        self._min_scale: float | None = None
        self._initial_scale: float | None = None
        self.findings: list[Finding] = []
        self._seen: set[str] = set()
        self._locator = Locator()
        self.steps = 0
        self.skipped = 0
        self._losses: list[Tensor | float] = []
        self.bind(model, optimizer, scaler)

    # ------------------------------------------------------------------ setup
    def bind(self, model: nn.Module | None, optimizer: torch.optim.Optimizer | None, scaler: Any = None) -> Guard:
        """Watch this model/optimizer/scaler (called by ``attach_guard`` and ``on_fit_start``)."""
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        modules = list(model.modules()) if model is not None else []
        self._batchnorms = [m for m in modules if isinstance(m, _BATCHNORM)]
        self._stochastic = [m for m in modules if isinstance(m, _STOCHASTIC)]
        return self

    def _params(self) -> list[Tensor]:
        """Read at each check: parameter groups added to the optimizer mid-run (unfreezing) count too."""
        if self.optimizer is not None:
            return [p for group in self.optimizer.param_groups for p in group["params"]]
        return list(self.model.parameters()) if self.model is not None else []

    # ------------------------------------------------------------------ reporting
    def _report(self, check_id: str, severity: str, message: str, fix: str) -> None:
        if check_id in self._seen:
            return
        self._seen.add(check_id)
        where = self._locator.here(2)
        finding = Finding(check_id, severity, display_path(where[0]) if where else None,
                          where[1] if where else None, message, fix)
        self.findings.append(finding)
        if self.warn:
            warnings.warn(DoctorWarning(f"[{check_id}] {message} Fix: {fix}"), stacklevel=_caller_level())

    def report(self) -> str:
        """The findings so far, formatted like ``torchwork doctor``."""
        return format_report(self.findings, "the training run", None)

    # ------------------------------------------------------------------ the per-step checks
    def after_step(self, loss: Tensor | float | None, *, batch_size: int | None = None,
                   grad_norm: Tensor | float | None = None, skipped: bool = False) -> None:
        """Check one optimizer step: call it after ``optimizer.step()`` (gradients still in ``.grad``).

        ``loss`` is the step's loss (detached is best); ``batch_size`` the smallest micro-batch size;
        ``grad_norm`` a norm the loop already computed (before clipping); ``skipped`` whether a GradScaler
        skipped this step (its gradients were inf/NaN on purpose). Per step this only stores the loss;
        everything is checked together every ``check_every`` steps (one device sync at most).
        """
        self.steps += 1
        if loss is not None:
            if isinstance(loss, Tensor) and loss.requires_grad:
                loss = loss.detach()  # never keep a graph alive
            self._losses.append(loss)
        if skipped:
            self.skipped += 1
        if batch_size == 1:
            self._check_modes(self.steps, batch_size)
        if self.steps % self.check_every == 0:
            self.flush(grad_norm=None if skipped else grad_norm, check_norm=not skipped)

    def flush(self, grad_norm: Tensor | float | None = None, check_norm: bool = True) -> None:
        """Run the batched checks now (after_step does it every ``check_every`` steps)."""
        losses, self._losses = self._losses, []
        first = self.steps - len(losses) + 1
        if losses:
            self._check_losses(losses, first)
        self._check_modes(self.steps, None)
        if check_norm:
            self._check_grad_norm(grad_norm, self.steps)
        self._check_scaler(self.steps)

    def _check_modes(self, step: int, batch_size: int | None) -> None:
        model = self.model
        if model is None:
            return
        if batch_size == 1 and model.training and any(m.training for m in self._batchnorms):
            self._report("batchnorm-single-sample", "warning",
                         f"Step {step} had a batch of one sample reaching BatchNorm in training mode: its "
                         "batch statistics are meaningless (BatchNorm1d raises on it).",
                         "Use drop_last=True in the training DataLoader.")
        if not model.training and self._stochastic:
            self._report("train-mode", "warning",
                         f"Step {step} trained the model in eval mode: its {len(self._stochastic)} Dropout/"
                         "BatchNorm layer(s) were inactive.",
                         "Call model.train() before training (and after any model.eval()).")

    def _check_losses(self, losses: list[Tensor | float], first: int) -> None:
        tensors = [t for t in losses if isinstance(t, Tensor)]
        values: list[float]
        if len(tensors) == len(losses):
            if {t.ndim for t in tensors} == {0}:  # the engine's case: no per-loss reshaping to pay for
                stacked = torch.stack(tensors)
            else:
                stacked = torch.stack([t.reshape(-1)[:1] for t in tensors])
            stacked = stacked.float().reshape(-1)
            if bool(torch.isfinite(stacked).all()):
                return
            values = stacked.tolist()
        else:
            values = [float(t.reshape(-1)[0]) if isinstance(t, Tensor) else float(t) for t in losses]
        for offset, value in enumerate(values):
            if not math.isfinite(value):
                self._nonfinite(value, first + offset)
                return

    def _nonfinite(self, value: float, step: int) -> None:
        self._report("non-finite-loss", "error", f"The loss became {value} at step {step}: the weights are being "
                     "corrupted by NaN/Inf updates.",
                     "Run the script under `torchwork doctor` to find the first operation that produced the "
                     "value; lower the learning rate, clip gradients, check the data for NaN/Inf.")

    def _check_grad_norm(self, grad_norm: Tensor | float | None, step: int) -> None:
        if grad_norm is None:
            grad_norm = total_grad_norm(self._params())
            if grad_norm is None:
                return
        norm = float(grad_norm)
        what = self._norms.verdict(norm, step)
        if not math.isfinite(norm) and "non-finite-loss" in self._seen:
            return  # one cause, one finding (as the doctor's check): NaN gradients follow from the NaN loss
        if what is not None:
            self._report("exploding-gradients", "warning", what,
                         "Lower the learning rate, clip gradients (clip_grad_norm=1.0), normalise inputs/targets.")

    def _check_scaler(self, step: int) -> None:
        scaler = self.scaler
        if scaler is None or not scaler.is_enabled():
            return
        scale = scaler.get_scale()
        if self._initial_scale is None:
            self._initial_scale = self._min_scale = scale
        self._min_scale = min(self._min_scale, scale)
        what = scale_collapse(self._min_scale, self._initial_scale, step, self.skipped)
        if what is not None:
            self._report("amp-scale-collapse", "warning",
                         f"{what}: {self.skipped} of {step} steps were skipped for inf/NaN gradients, so fp16 "
                         "overflows at every step.",
                         "Find the overflow (unnormalised data, summed losses, fp16-unsafe ops) or use bf16.")

    # ------------------------------------------------------------------ evaluation (own loops)
    def before_evaluation(self) -> None:
        """Call when evaluation starts: Dropout/BatchNorm must be in eval mode by then."""
        active = [m for m in self._stochastic if m.training]
        if active:
            self._report("eval-mode", "warning",
                         f"Evaluation started with {len(active)} Dropout/BatchNorm layer(s) in training mode.",
                         "Call model.eval() before evaluating (and model.train() afterwards).")

    # ------------------------------------------------------------------ engine callback protocol
    def on_fit_start(self, trainer: Any) -> None:
        if self.model is None:
            self.bind(trainer.model, trainer.optimizer, getattr(trainer, "scaler", None))
        if not self._check_every_given:
            self.check_every = trainer.log_every_n_steps  # check on the steps that log (and sync) anyway

    def on_step_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        """The Trainer's per-step dispatch: the step's values as they are (tensors), see :meth:`after_step`.
        Steps are counted as the Trainer counts them, so that checks fall on its logging steps (a resumed
        run included) and findings name the step its logs show."""
        if "step" in logs:
            self.steps = int(logs["step"]) - 1
        self.after_step(logs.get("loss"), batch_size=logs.get("batch_size"), grad_norm=logs.get("grad_norm"),
                        skipped=bool(logs.get("skipped", False)))

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        """Check what is left of the epoch (the steps since the last check)."""
        if self._losses:
            self.flush()

    def on_fit_end(self, trainer: Any) -> None:
        """Check the steps since the last check when training ends mid-epoch (``max_steps``, a stop)."""
        if self._losses:
            self.flush()


def _caller_level() -> int:
    """warnings.warn stacklevel of the first frame outside this module (the loop that called the guard)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame, level = frame.f_back, level + 1
    return level


def attach_guard(trainer: Any, **options: Any) -> Guard:
    """A :class:`Guard` bound to a Trainer's model, optimizer and scaler, checking every
    ``log_every_n_steps`` steps unless ``check_every`` is given. The Trainer hands it each step through
    ``on_step_end`` (``fit``) or directly (``Trainer.step``)."""
    options.setdefault("check_every", getattr(trainer, "log_every_n_steps", None))
    return Guard(trainer.model, trainer.optimizer, scaler=getattr(trainer, "scaler", None), **options)
