"""Callbacks: small hooks for users who need one, and early stopping.

A callback is any object with some of ``on_fit_start(trainer)``, ``on_step_end(trainer, logs)``,
``on_epoch_end(trainer, logs)`` and ``on_fit_end(trainer)``.

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

import math
from typing import Any

from torchwork.errors import ConfigError


class Callback:
    """Base class with no-op hooks; subclass and override what you need."""

    def on_fit_start(self, trainer: Any) -> None: ...

    def on_step_end(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_fit_end(self, trainer: Any) -> None: ...


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", mode: str = "min", patience: int = 3,
                 min_delta: float = 0.0) -> None:
        if mode not in ("min", "max"):
            raise ConfigError(f"EarlyStopping(mode={mode!r}): use 'min' or 'max'.")
        if patience < 1:
            raise ConfigError(f"EarlyStopping(patience={patience}): patience must be at least 1.")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, abs(min_delta)
        self.best = math.inf if mode == "min" else -math.inf
        self.best_epoch: int | None = None
        self.bad_epochs = 0
        self.reason: str | None = None  # why it stopped training, in words (None: it did not)

    def improved(self, value: float) -> bool:
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        if self.monitor not in logs:
            raise ConfigError(f"EarlyStopping monitors {self.monitor!r}, but the epoch logged only "
                              f"{sorted(logs)}. Pass a val_loader, or monitor one of those names.")
        value = float(logs[self.monitor])
        if self.improved(value):
            self.best, self.best_epoch, self.bad_epochs = value, logs.get("epoch"), 0
        else:
            self.bad_epochs += 1
            if self.bad_epochs >= self.patience:
                trainer.should_stop = True
                self.reason = (f"early stopping: {self.monitor} has not improved on {self.best:.4g} "
                               f"(epoch {self.best_epoch}) for {self.bad_epochs} epochs (patience {self.patience})")

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "best_epoch": self.best_epoch, "bad_epochs": self.bad_epochs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_epoch, self.bad_epochs = state["best"], state["best_epoch"], state["bad_epochs"]
