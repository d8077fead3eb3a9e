"""The metric names a ``fit`` will log where a monitor reads them, known before it starts, so that a
misspelt monitor (early stopping's, ``checkpoint_monitor``, ``plateau_monitor``) is refused with a "did you
mean" before the run folder is made, not after the first epoch (or never: ``best.pt`` silently not written).

Known before training: an epoch's own metrics (``train_loss``, ``lr``, ... :func:`~torchwork.engine.epoch.
epoch_log_names`) and each evaluation set's loss, ``metrics=`` and ``epoch_metrics=`` (``val_loss``,
``val_accuracy``; ``val/loss`` for named sets). Known only once the loss ran: the terms of a ``loss_fn``
returning a dict (``train_<term>``, ``val_loss_<term>``): names under those prefixes are left to the check at
the epoch's end. A callback of the user's own with ``on_epoch_end`` or ``on_evaluate_end`` may add metrics to
the logs it is given: with one, a name not known is left to that later check too (torchwork's own callbacks
only read the logs).

Example:
    >>> names = LoggedNames({"train_loss", "val_loss"}, ("val_loss_",), others_may_add=False)
    >>> names.problem("val_loss"), names.problem("val_loss_ce")
    (None, None)
    >>> names.problem("val_los")
    "did you mean 'val_loss'? It logs train_loss, val_loss"
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from torchwork.engine.callbacks import Callback
from torchwork.engine.epoch import epoch_log_names

if TYPE_CHECKING:
    from torchwork.engine.evaluation import EvaluationSets
    from torchwork.engine.trainer import Trainer

_LOG_HOOKS = ("on_epoch_end", "on_evaluate_end")  # the hooks given the logs a monitor is read from


def may_add_metrics(callback: Any) -> bool:
    """Whether ``callback`` may add metrics to the logs a monitor reads: one of the user's own with
    ``on_epoch_end`` or ``on_evaluate_end`` (not :class:`Callback`'s empty ones)."""
    if type(callback).__module__.partition(".")[0] == "torchwork":
        return False  # early stopping, the guard, tuning's pruning and budget, unfreezing: they only read
    for hook in _LOG_HOOKS:
        method = getattr(callback, hook, None)
        if method is not None and getattr(method, "__func__", method) is not getattr(Callback, hook):
            return True
    return False


class LoggedNames:
    """The names known to be logged, the prefixes of names known only later, and whether a callback may add
    others; :meth:`problem` says what is wrong with a monitor."""

    def __init__(self, known: Iterable[str], open_prefixes: tuple[str, ...], others_may_add: bool) -> None:
        self.known, self.open_prefixes, self.others_may_add = set(known), open_prefixes, others_may_add

    @classmethod
    def of(cls, trainer: Trainer, sets: EvaluationSets, step_based: bool) -> LoggedNames:
        """What ``trainer``'s fit logs where monitors are read: with ``step_based`` evaluations the sets'
        metrics alone, else the epoch's record (its own metrics and the sets')."""
        known, prefixes = sets.metric_names(trainer)
        if not step_based:
            known |= epoch_log_names(trainer)
            prefixes = (*prefixes, "train_")
        return cls(known, prefixes, any(may_add_metrics(c) for c in trainer.callbacks))

    def problem(self, monitor: str) -> str | None:
        """Why ``monitor`` is no name this fit logs, with the closest one (None: it is, or may be)."""
        if monitor in self.known or monitor.startswith(self.open_prefixes) or self.others_may_add:
            return None
        names = sorted(self.known)
        close = difflib.get_close_matches(monitor, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{hint}It logs {', '.join(names)}"
