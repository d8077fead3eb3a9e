"""Callbacks: small hooks for users who need one, and early stopping.

A callback is any object with some of these methods, called in this order:

- ``on_fit_start(trainer)``: once, after a resume restored the checkpoint;
- ``on_epoch_start(trainer)``: before an epoch's first batch (not when a resume continues an epoch mid-way:
  what it would reset is in the checkpoint, so the resume stays exact);
- ``on_step_end(trainer, logs)``: after each optimizer step (``logs`` holds tensors: read them only when
  needed, each read is a device sync);
- ``on_evaluate_start(trainer, name)`` and ``on_evaluate_end(trainer, name, metrics)``: around each
  evaluation set's pass (``name``: ``"val"`` for a single loader, else the set's name; ``metrics`` as logged,
  ``val_loss`` or ``train/loss``), at each epoch's end, or every ``eval_every`` steps;
- ``on_epoch_end(trainer, logs)``: after the epoch's evaluation, with the epoch's metrics;
- ``on_fit_end(trainer)``: once training ended.

A callback with ``state_dict()`` and ``load_state_dict(state)`` has its state in every checkpoint.

Example:
    >>> from torchwork.engine.callbacks import EarlyStopping
    >>> stopper = EarlyStopping(monitor="val_loss", patience=1)
    >>> class T: should_stop = False
    >>> t = T()
    >>> stopper.on_epoch_end(t, {"val_loss": 1.0}); stopper.on_epoch_end(t, {"val_loss": 1.5})
    >>> t.should_stop
    True
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_finite_number
from torchwork.quoting import quote_value


class Callback:
    """Base class with no-op hooks; subclass and override what you need."""

    def on_fit_start(self, trainer: Any) -> None: ...

    def on_epoch_start(self, trainer: Any) -> None: ...

    def on_step_end(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_evaluate_start(self, trainer: Any, name: str) -> None: ...

    def on_evaluate_end(self, trainer: Any, name: str, metrics: dict[str, float]) -> None: ...

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_fit_end(self, trainer: Any) -> None: ...


def _step_based(trainer: Any) -> bool:
    """Whether ``trainer`` evaluates every K steps (``fit(eval_every=K)``) rather than at epochs' ends."""
    return getattr(getattr(trainer, "loop", None), "step_based", False) is True


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs (with
    ``fit(eval_every=K)``: ``patience`` evaluations, and training stops at the evaluation that decides it).

    ``patience`` 0 and 1 both stop at the first epoch that does not improve (as Keras's). ``min_delta`` is
    the least change that counts as an improvement, >= 0: ``mode`` gives its direction. ``fit`` checks the
    monitor against the metrics it will log before it starts (:mod:`torchwork.engine.logged_names`).
    ``check_finite`` (as Lightning's EarlyStopping): a NaN or infinite monitor stops training at once, with
    the reason, rather than counting as ``patience`` epochs of no improvement: no later epoch compares
    better than NaN, and the weights or the evaluation data are already broken."""

    def __init__(self, monitor: str = "val_loss", mode: str = "min", patience: int = 3,
                 min_delta: float = 0.0, check_finite: bool = True) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ConfigError(f"EarlyStopping(monitor={monitor!r}): name the metric to watch, e.g. 'val_loss'.")
        if mode not in ("min", "max"):
            raise ConfigError(f"EarlyStopping(mode={mode!r}): use 'min' or 'max'.")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ConfigError(f"EarlyStopping(patience={patience!r}): patience is a count of epochs (or "
                              "evaluations) without improvement, an integer >= 0.")
        if not is_finite_number(min_delta) or min_delta < 0:
            raise ConfigError(f"EarlyStopping(min_delta={quote_value(min_delta)}): the least change that counts as an "
                              "improvement must be a finite number >= 0 (mode='min' or 'max' gives its direction).")
        if not isinstance(check_finite, bool):
            raise ConfigError(f"EarlyStopping(check_finite={check_finite!r}): pass True or False.")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, float(min_delta)
        self.check_finite = check_finite
        self.best = math.inf if mode == "min" else -math.inf
        self.best_epoch: int | None = None  # with fit(eval_every=K): the step of the best value
        self.bad_epochs = 0
        self.reason: str | None = None  # why it stopped training, in words (None: it did not)

    def improved(self, value: float) -> bool:
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        if _step_based(trainer):
            return  # judged at each evaluation instead
        if self.monitor not in logs:
            close = difflib.get_close_matches(self.monitor, sorted(logs), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"EarlyStopping monitors {self.monitor!r}, but the epoch logged only "
                              f"{sorted(logs)}. {hint}Pass a val_loader, or monitor one of those names.")
        self._judge(trainer, float(logs[self.monitor]), logs.get("epoch"), "epoch")

    def on_evaluate_end(self, trainer: Any, name: str, metrics: dict[str, float]) -> None:
        if _step_based(trainer) and self.monitor in metrics:
            self._judge(trainer, float(metrics[self.monitor]), getattr(trainer, "global_step", None), "step")

    def _judge(self, trainer: Any, value: float, when: Any, unit: str) -> None:
        if self.check_finite and not math.isfinite(value):
            trainer.should_stop = True
            self.reason = (f"early stopping: {self.monitor} is {value} at {unit} {when}: the model's outputs or "
                           "the evaluation data hold a NaN or inf (look at the evaluation batches' inputs and "
                           "targets, and the training loss before it; EarlyStopping(check_finite=False) goes on)")
            return
        if self.improved(value):
            self.best, self.best_epoch, self.bad_epochs = value, when, 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs >= self.patience:
                trainer.should_stop = True
                counted = "epochs" if unit == "epoch" else "evaluations"
                self.reason = (f"early stopping: {self.monitor} has not improved on {self.best:.4g} "
                               f"({unit} {self.best_epoch}) for {self.bad_epochs} {counted} (patience {self.patience})")

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch, self.bad_epochs = state["best"], state["best_epoch"], state["bad_epochs"]


HOOKS = ("on_fit_start", "on_epoch_start", "on_step_end", "on_evaluate_start", "on_evaluate_end", "on_epoch_end",
         "on_fit_end")


def check_callbacks(callbacks: Any) -> list[Any]:
    """``callbacks`` as a list, each an object with at least one of :data:`HOOKS`; a ConfigError otherwise.
    A class given for an instance (``callbacks=[EarlyStopping]``) failed only when fit started, with
    "on_fit_start() missing 1 required positional argument"; an object with no hook was never called.

    Example:
        >>> check_callbacks([EarlyStopping()])[0].monitor
        'val_loss'
    """
    if isinstance(callbacks, (str, bytes, Mapping)) or not isinstance(callbacks, Iterable):
        raise ConfigError(f"callbacks={quote_value(callbacks)}: pass a list of callback objects, e.g. "
                          "callbacks=[EarlyStopping('val_loss')].")
    callbacks = list(callbacks)
    for index, callback in enumerate(callbacks):
        if isinstance(callback, type):
            raise ConfigError(f"callbacks[{index}] is the class {callback.__name__}, not a callback: pass an "
                              f"instance, {callback.__name__}(...).")
        if not any(callable(getattr(callback, hook, None)) for hook in HOOKS):
            raise ConfigError(f"callbacks[{index}] (a {type(callback).__name__}) has none of the hooks "
                              f"{', '.join(HOOKS)}: it would never be called.")
    return callbacks
