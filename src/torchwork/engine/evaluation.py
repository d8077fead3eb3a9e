"""Evaluation: the sets ``fit`` evaluates on, their metric names, the hooks around each, one set's pass.

``fit(train, val_loader)`` takes one loader, whose metrics keep their names (``val_loss``,
``val_accuracy``), or several by name, ``{"train": train_eval, "val": val}``, whose metrics are logged per
set with its name as a prefix (``train/loss``, ``val/loss``), as nanoGPT's ``estimate_loss`` reports both
splits. Around each set's pass a callback's ``on_evaluate_start(trainer, name)`` and
``on_evaluate_end(trainer, name, metrics)`` run. The set that picks ``best.pt`` and that early stopping
watches is the one a monitor names; by default ``"val"`` when there is one, else the only one.

Example:
    >>> sets = EvaluationSets.of({"train": [1], "val": [2]})
    >>> [sets.prefix(name) for name in sets.names], sets.default_monitor
    (['train/', 'val/'], 'val/loss')
    >>> EvaluationSets.of([1]).prefix("val"), EvaluationSets.of([1]).default_monitor
    ('val_', 'val_loss')
    >>> EvaluationSets.of({"a/b": [1]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: val_loader={'a/b': ...}: a set's name is a non-empty string without '/' ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from torchwork.engine.batches import call_model, concat_outputs, inputs_of, split_error
from torchwork.engine.devices import move_to_device
from torchwork.errors import ConfigError

if TYPE_CHECKING:
    from torchwork.engine.step import ForwardLoss
    from torchwork.engine.trainer import Trainer


class EvaluationSets:
    """The loaders ``fit`` evaluates on, by name, and how their metrics are named."""

    def __init__(self, loaders: Mapping[str, Any], named: bool) -> None:
        self.loaders, self.named = dict(loaders), named

    @classmethod
    def of(cls, val_loader: Any) -> EvaluationSets:
        """From ``fit``'s ``val_loader``: None, one loader (named ``"val"``, metrics ``val_*``), or a dict of
        loaders by name (metrics ``NAME/*``), checked."""
        if val_loader is None:
            return cls({}, named=False)
        if not isinstance(val_loader, Mapping):
            return cls({"val": val_loader}, named=False)
        if not val_loader:
            raise ConfigError("val_loader={} names no evaluation set: pass None to evaluate nothing, or "
                              "{'val': val_loader, ...}.")
        for name, loader in val_loader.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ConfigError(f"val_loader={{{name!r}: ...}}: a set's name is a non-empty string without "
                                  "'/' (its metrics are logged as NAME/loss), e.g. {'train': ..., 'val': ...}.")
            if loader is None or not isinstance(loader, Iterable):
                raise ConfigError(f"val_loader[{name!r}] is {type(loader).__name__}, not a loader (an iterable "
                                  "of batches, such as a DataLoader).")
        return cls(val_loader, named=True)

    @property
    def names(self) -> list[str]:
        return list(self.loaders)

    def __bool__(self) -> bool:
        return bool(self.loaders)

    def prefix(self, name: str) -> str:
        """What the set's metric names start with: ``val_`` for a single loader, ``NAME/`` for a named set."""
        return f"{name}/" if self.named else "val_"

    @property
    def selected(self) -> str | None:
        """The set that picks ``best.pt`` by default: ``"val"``, else the only one (None: no set, or several
        and none named ``"val"``)."""
        if "val" in self.loaders:
            return "val"
        return self.names[0] if len(self.loaders) == 1 else None

    @property
    def default_monitor(self) -> str | None:
        """The metric that picks ``best.pt`` when no monitor is given (None: no evaluation set decides it)."""
        selected = self.selected
        return None if selected is None else f"{self.prefix(selected)}loss"

    @property
    def manifest_loader(self) -> Any:
        """The loader the run's manifest records as its validation data: the selected set's (else the first)."""
        if not self.loaders:
            return None
        return self.loaders[self.selected or self.names[0]]

    def monitor_problem(self, monitor: str, epoch_logs: bool) -> str | None:
        """Why ``monitor`` names no metric the evaluations log (None: it does). ``epoch_logs``: an epoch's
        training metrics (``train_loss``, ``lr``, ...) are at hand too."""
        if any(monitor.startswith(self.prefix(name)) for name in self.names):
            return None
        if epoch_logs and not monitor.startswith("val_") and "/" not in monitor:
            return None  # an epoch's own metric (train_loss): checked when the epoch logs it, as before
        if not self.loaders:
            return "no evaluation set logs it: pass val_loader"
        logged = ", ".join(f"{self.prefix(name)}..." for name in self.names)
        return f"the evaluation sets log {logged} (e.g. {self.prefix(self.selected or self.names[0])}loss)"

    def metric_names(self, trainer: Trainer) -> tuple[set[str], tuple[str, ...]]:
        """The names the sets' evaluations log (``val_loss``, ``val_<metric>``, ``val/loss``, ...), and the
        prefixes of the names known only once the loss ran (``val_loss_<term>`` of a ``loss_fn`` returning a
        dict of terms)."""
        measured = ["loss", *trainer.metrics, *trainer.epoch_metrics]
        names = {f"{self.prefix(name)}{metric}" for name in self.names for metric in measured}
        return names, tuple(f"{self.prefix(name)}loss_" for name in self.names)

    def run(self, trainer: Trainer) -> dict[str, float]:
        """Evaluate every set, in order, with the callbacks' ``on_evaluate_start``/``on_evaluate_end`` around
        each; returns all their metrics, prefixed."""
        results: dict[str, float] = {}
        for name, loader in self.loaders.items():
            for callback in trainer.callbacks:
                if hasattr(callback, "on_evaluate_start"):
                    callback.on_evaluate_start(trainer, name)
            metrics = trainer.evaluate(loader, prefix=self.prefix(name))
            for callback in trainer.callbacks:
                if hasattr(callback, "on_evaluate_end"):
                    callback.on_evaluate_end(trainer, name, metrics)
            results.update(metrics)
        return results


def evaluate_loader(trainer: Trainer, forward: ForwardLoss, loader: Iterable[Any],
                    prefix: str = "") -> dict[str, float]:
    """Mean loss (and ``metrics``) over ``loader``, weighted by batch size, plus ``epoch_metrics`` over all
    of it, in eval mode (:meth:`~torchwork.engine.trainer.Trainer.evaluate`). Each batch goes through
    ``forward``, the training step's own forward-and-loss path, with the plain model."""
    totals: dict[str, float] = {}
    samples_seen = 0
    collected: list[tuple[Any, Any]] = []  # (outputs, targets) on the CPU, for epoch_metrics
    world = trainer.world
    if world.is_distributed:
        from torchwork.distributed.setup import shard_loader

        loader = shard_loader(loader, world, train=False)  # each rank evaluates its share
    with trainer.evaluating():
        for batch in loader:
            values, samples, pair = _batch_values(trainer, forward, batch)
            if pair is not None and trainer.epoch_metrics:
                collected.append(move_to_device(pair, torch.device("cpu")))
            for name, value in values.items():
                totals[name] = totals.get(name, 0.0) + float(value) * samples
            samples_seen += samples
    if world.is_distributed:
        from torchwork.distributed.setup import all_reduce_sum, gather_object

        # a rank whose shard was empty has no names yet: agree on the union first
        names = sorted({name for names in gather_object(sorted(totals)) for name in names})
        summed = all_reduce_sum([float(samples_seen), *(totals.get(n, 0.0) for n in names)], trainer.device)
        samples_seen, totals = int(summed[0]), dict(zip(names, summed[1:]))
    if samples_seen == 0:
        raise ConfigError("the evaluation loader yielded no batches.")
    results = {f"{prefix}{name}": total / samples_seen for name, total in totals.items()}
    if trainer.epoch_metrics:
        if world.is_distributed:
            from torchwork.distributed.setup import gather_object

            collected = [pair for part in gather_object(collected) for pair in part]
        outputs = concat_outputs([o for o, _ in collected])
        targets = concat_outputs([t for _, t in collected])
        for name, metric in trainer.epoch_metrics.items():
            results[f"{prefix}{name}"] = float(metric(outputs, targets))
    return results


def _batch_values(trainer: Trainer, forward: ForwardLoss, batch: Any) -> tuple[dict[str, Any], int, Any]:
    """One evaluation batch's loss and metrics (then its named loss terms), its sample count, and its
    ``(outputs, targets)`` (None under a ``step_fn``)."""
    if trainer.step_fn is None and (not isinstance(batch, (tuple, list)) or len(batch) != 2):
        raise split_error(batch)
    loss, samples, outputs, targets = forward.forward(trainer.model, batch)
    loss, terms = forward.combine(loss)
    values: dict[str, Any] = {"loss": loss}
    pair = None
    if trainer.step_fn is None:
        for name, metric in trainer.metrics.items():
            values[name] = metric(outputs, targets)
        pair = (outputs, targets)
    values.update({f"loss_{name}": value for name, value in (terms or {}).items()})
    return values, samples, pair


def predict_loader(model: Any, device: torch.device, loader: Iterable[Any]) -> Any:
    """``model``'s outputs for every batch of ``loader``, on the CPU, joined along dimension 0 (run it in
    eval mode: :meth:`~torchwork.engine.trainer.Trainer.predict`)."""
    outputs = []
    for batch in loader:
        inputs = move_to_device(inputs_of(batch), device)
        outputs.append(move_to_device(call_model(model, inputs), torch.device("cpu")))
    return concat_outputs(outputs)
