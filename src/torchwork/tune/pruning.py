"""Pruning from the engine's per-epoch validation metric: a Trainer callback that reports each epoch to the
trial once and stops the fit when the pruner says so.

A resumed trial (the retry of a killed one, on a fresh Optuna trial) first reports the epochs its checkpoint
already holds, each once and with the value the checkpoint recorded, then asks the pruner again: nothing is
lost, nothing reported twice.

Example:
    >>> make_pruner("percentile").__class__.__name__, make_pruner("median").__class__.__name__
    ('PercentilePruner', 'MedianPruner')
    >>> make_pruner("asha")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --pruner 'asha': use percentile, median, hyperband or none.
"""

from __future__ import annotations

from typing import Any

from torchwork.engine.callbacks import Callback
from torchwork.errors import ConfigError

PRUNERS = ("percentile", "median", "hyperband", "none")
DEFAULT_PRUNER = "percentile"
# The default: prune a trial whose best score so far is in the bottom 40% of the scores the finished trials had
# at the same epoch, from the first epoch on, once 2 trials have finished. Chosen on three recorded n-gram
# studies (benchmarks/tune.py's space; 16 trials x 2 seeds on 3000 rows, 6 trials on 300), replayed through
# Optuna's pruners: it kept each study's best trial with 59%, 52% and 39% fewer epochs, where the median from
# the second epoch after a quarter of the trials (the old default) lost the 6-trial study's best and saved only
# 28% and 38% on the 16-trial ones. Under a one-cycle schedule a long trial's early epochs score below a
# short one's: cutting at the median of so few trials threw good long trials out.
PERCENTILE_KEPT = 60.0


def make_pruner(name: str, max_epochs: int | None = 12, trials: int = 16) -> Any:
    """``percentile`` (the default: Optuna's PercentilePruner keeping the top 60%, from the first epoch on, once
    2 trials have finished), ``median`` (Optuna's MedianPruner, from the second epoch on, once a quarter of the
    trials, at least 1 and at most 4, have finished), ``hyperband`` (epochs as the resource) or ``none``."""
    import optuna

    if name == "percentile":
        return optuna.pruners.PercentilePruner(PERCENTILE_KEPT, n_startup_trials=2, n_warmup_steps=0)
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=min(4, max(1, trials // 4)), n_warmup_steps=1)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(int(max_epochs), 1) if max_epochs else "auto",
                                              reduction_factor=3)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"--pruner {name!r}: use {', '.join(PRUNERS[:-1])} or {PRUNERS[-1]}.")


class PruningCallback(Callback):
    """Reports ``monitor`` at the end of every epoch to ``trial`` and stops a trial the pruner prunes
    (before its last epoch, ``epochs``)."""

    def __init__(self, trial: Any, monitor: str, epochs: int | None = None) -> None:
        self.trial, self.monitor, self.epochs = trial, monitor, epochs
        self.pruned_at: int | None = None
        self.reported: list[int] = []
        self.resumed_epochs = 0
        self.trainer: Any = None  # the Trainer it was given to (set when its fit starts)

    def _report(self, epoch: int, value: float) -> None:
        self.trial.report(float(value), step=int(epoch))
        self.reported.append(int(epoch))

    def _check(self, trainer: Any, epoch: int) -> None:
        if self.epochs is not None and epoch + 1 >= self.epochs:
            return  # the last epoch is trained already: pruning it would save nothing and lose its score
        if self.trial.should_prune():
            self.pruned_at = epoch
            trainer.should_stop = True

    def on_fit_start(self, trainer: Any) -> None:
        self.trainer = trainer
        if self.epochs is None:  # a user's own Trainer: its fit says how many epochs it trains
            self.epochs = getattr(trainer, "epochs_planned", None)
        history = list(trainer.history)  # restored from the checkpoint when resuming
        self.resumed_epochs = len(history)
        for logs in history:
            self._report(_index(logs), logs[self.monitor])
        if history:
            self._check(trainer, _index(history[-1]))
            stopper = getattr(trainer, "early_stopping", None)
            if stopper is not None and getattr(stopper, "bad_epochs", 0) >= getattr(stopper, "patience", 1):
                trainer.should_stop = True  # killed after early stopping's last checkpoint: it had stopped

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        if self.monitor not in logs:
            raise ConfigError(f"the tuner prunes on {self.monitor!r}, but the epoch logged only {sorted(logs)}.")
        self._report(_index(logs), logs[self.monitor])
        self._check(trainer, _index(logs))


def _index(logs: dict[str, Any]) -> int:
    """The epoch's 0-based index, Optuna's step: the Trainer's logs count epochs from 1."""
    return int(logs["epoch"]) - 1
