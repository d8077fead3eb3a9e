"""One epoch's training pass: its accumulation windows, its running totals (typed, and in every mid-epoch
checkpoint), the logs of each step, and the epoch's summary.

:class:`EpochTotals` is what an epoch adds up as it trains (loss and named loss terms weighted by samples,
steps, gradient norms, time); a mid-epoch checkpoint holds it as its ``epoch_totals`` entry, the plain dict
of :meth:`EpochTotals.state_dict` (the same keys as before it was typed), so that a resumed epoch reports the
figures of the whole epoch.

Example:
    >>> import torch
    >>> totals = EpochTotals.fresh(torch.device("cpu"), skipped_steps=0)
    >>> totals.add(torch.tensor(0.5), 8, None, None); totals.add(torch.tensor(1.0), 8, None, None)
    >>> again = EpochTotals.from_state_dict(totals.state_dict(), torch.device("cpu"))
    >>> again.steps, again.samples, float(again.loss_sum) / again.samples
    (2, 16, 0.75)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from torchwork.data.lengths import length_or_none
from torchwork.engine.progress import ProgressBar
from torchwork.errors import ConfigError

if TYPE_CHECKING:
    from torchwork.engine.loop import TrainingLoop
    from torchwork.engine.step import StepResult
    from torchwork.engine.trainer import Trainer

Tensor = torch.Tensor


@dataclass
class EpochTotals:
    """What the epoch in progress has added up; tensors stay on the device (no sync per step)."""

    loss_sum: Tensor  # the window losses, each weighted by its samples
    norm_sum: Tensor  # the pre-clip gradient norms (clip_grad_norm)
    samples: int = 0
    steps: int = 0
    terms: dict[str, Tensor] = field(default_factory=dict)  # named loss terms, weighted by samples
    elapsed: float = 0.0  # seconds spent training (evaluations and checkpoints left out)
    skipped_at_start: int = 0  # the GradScaler's skipped steps when the epoch began

    @classmethod
    def fresh(cls, device: torch.device, skipped_steps: int) -> EpochTotals:
        zero = torch.zeros((), device=device)
        return cls(zero.clone(), zero.clone(), skipped_at_start=skipped_steps)

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint's ``epoch_totals`` entry."""
        return {"loss_sum": self.loss_sum, "samples": self.samples, "steps": self.steps, "norm_sum": self.norm_sum,
                "terms": dict(self.terms), "elapsed": self.elapsed, "skipped_at_start": self.skipped_at_start}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], device: torch.device) -> EpochTotals:
        """From a checkpoint's ``epoch_totals`` (checked by :mod:`torchwork.runs.contents`), on ``device``."""
        def tensor(value: Any) -> Tensor:  # a copy: the epoch adds to it in place, not to the loaded state
            return torch.as_tensor(value, device=device).clone()

        totals = cls.fresh(device, int(state.get("skipped_at_start", 0)))
        totals.loss_sum, totals.norm_sum = tensor(state.get("loss_sum", 0.0)), tensor(state.get("norm_sum", 0.0))
        totals.samples, totals.steps = int(state.get("samples", 0)), int(state.get("steps", 0))
        totals.terms = {name: tensor(value) for name, value in state.get("terms", {}).items()}
        totals.elapsed = float(state.get("elapsed", 0.0))
        return totals

    def add(self, loss: Tensor, samples: int, terms: Mapping[str, Tensor] | None, grad_norm: Tensor | None) -> None:
        """One optimizer step's window: its mean ``loss`` over ``samples``, its named ``terms``, its norm."""
        self.loss_sum.add_(loss, alpha=samples)  # one op, not a product and a sum
        self.samples += samples
        self.steps += 1
        if terms is not None:
            for name, value in terms.items():
                self.terms[name] = self.terms.get(name, 0) + value * samples
        if grad_norm is not None:
            self.norm_sum += grad_norm

    def summary(self, trainer: Trainer) -> dict[str, Any]:
        """The epoch's record: sample means (over every rank under DDP), speed, lr, norm and scale."""
        if self.steps == 0:
            raise ConfigError("the training loader yielded no batches: check the dataset length, "
                              "batch_size and drop_last.")
        names = sorted(self.terms)
        sums = [float(self.loss_sum), self.samples, *(float(self.terms[n]) for n in names)]
        if trainer.world.is_distributed:
            from torchwork.distributed.setup import all_reduce_sum

            sums = all_reduce_sum(sums, trainer.device)  # every rank reports the job's numbers
        samples = int(sums[1])
        logs = {"epoch": trainer.epoch + 1, "train_loss": sums[0] / samples}  # 1-based, as a person reads it
        for name, value in zip(names, sums[2:]):
            logs[f"train_{name}"] = value / samples
        logs.update(steps=self.steps, samples=samples, time_s=self.elapsed,
                    samples_per_s=samples / max(self.elapsed, 1e-9), lr=trainer.optimizer.param_groups[0]["lr"])
        if trainer.clip_grad_norm is not None:
            logs["grad_norm"] = float(self.norm_sum) / self.steps
        if trainer.scaler is not None:
            logs.update(skipped_steps=trainer.skipped_steps - self.skipped_at_start,
                        scale=trainer.scaler.get_scale())
        return logs


def epoch_log_names(trainer: Trainer) -> set[str]:
    """The names :meth:`EpochTotals.summary` logs for ``trainer``, known before training (a ``loss_fn``
    returning a dict adds ``train_<term>`` for each of its terms besides, known only once it ran)."""
    names = {"epoch", "train_loss", "steps", "samples", "time_s", "samples_per_s", "lr"}
    if trainer.clip_grad_norm is not None:
        names.add("grad_norm")
    if trainer.scaler is not None:
        names.update(("skipped_steps", "scale"))
    return names


def train_epoch(trainer: Trainer, totals: EpochTotals, batches: Iterable[Any], loop: TrainingLoop) -> dict[str, Any]:
    """Train on ``batches`` (the rest of the epoch) window by window, adding to ``totals``, logging, calling
    each callback's ``on_step_end`` and the loop at the steps it is due; returns the epoch's summary."""
    started = time.perf_counter()
    threads, state, loggers = trainer.cpu_threads, trainer.state, trainer.loggers
    on_step = [c.on_step_end for c in trainer.callbacks if hasattr(c, "on_step_end")]
    batches_total = length_or_none(batches)
    windows_total = -(-batches_total // trainer.accumulate) if batches_total is not None else None
    bar = ProgressBar(windows_total, enabled=trainer.progress if trainer.world.is_rank_zero else False,
                      epoch=trainer.epoch, epochs=trainer.epochs_planned, every_s=trainer.progress_every_s)
    show_bar, log_every = bar.enabled, trainer.log_every_n_steps
    threads.restart_timing()  # the epoch's first fetch (workers starting) is not a step's time
    for window in windows(batches, trainer.accumulate):
        result = trainer.run_window(window)
        state.batch_in_epoch += len(window)
        totals.add(result.loss, result.samples, trainer.loss_terms, result.grad_norm)
        if show_bar:
            bar.update(result.samples, result.loss)  # read (a device sync) only when a line is drawn
        if loggers and state.global_step % log_every == 0:
            logs = step_logs(trainer, result)
            for logger in loggers:
                logger.log(logs, state.global_step)
        if on_step:
            step_logs_now = step_logs_of(trainer, result)
            for callback in on_step:
                callback(trainer, step_logs_now)
        if loop.due(state.global_step):  # an evaluation, a checkpoint, or the end (max_steps, a stop)
            totals.elapsed += time.perf_counter() - started
            ends = loop.at_step()
            started = time.perf_counter()
            threads.restart_timing()
            if ends:
                break
        if loop.interrupt.raised:
            totals.elapsed += time.perf_counter() - started
            bar.close()
            loop.stop_interrupted()
    bar.close()
    totals.elapsed += time.perf_counter() - started
    threads.pause()  # validation, and whatever follows the run, at the chosen count
    return totals.summary(trainer)


def step_logs_of(trainer: Trainer, result: StepResult) -> dict[str, Any]:
    """What ``on_step_end`` gets at every step: tensors stay tensors, so that a callback (the guard
    included) costs no device sync unless it reads them."""
    state = trainer.state
    return {"step": state.global_step, "epoch": state.epoch + 1, "loss": result.loss,
            "grad_norm": result.grad_norm, "skipped": not result.stepped, "batch_size": result.smallest}


def step_logs(trainer: Trainer, result: StepResult) -> dict[str, Any]:
    """What the loggers get every ``log_every_n_steps`` steps (numbers: a device sync)."""
    logs: dict[str, Any] = {"step": trainer.global_step, "epoch": trainer.epoch + 1, "loss": float(result.loss),
                            "lr": trainer.optimizer.param_groups[0]["lr"]}
    terms = trainer.loss_terms
    if terms is not None:
        logs.update({f"loss_{k}": float(v) for k, v in terms.items()})
    if result.grad_norm is not None:
        logs["grad_norm"] = float(result.grad_norm)
    if trainer.scaler is not None:
        logs.update(scale=trainer.scaler.get_scale(), skipped_steps=trainer.skipped_steps)
    return logs


def windows(loader: Iterable[Any], size: int) -> Iterable[Sequence[Any]]:
    """Group batches into accumulation windows of ``size``; the last window of an epoch may be shorter."""
    if size == 1:
        return zip(loader)  # 1-tuples from C: no Python frame per step
    return _grouped(loader, size)


def _grouped(loader: Iterable[Any], size: int) -> Iterable[Sequence[Any]]:
    window: list[Any] = []
    for batch in loader:
        window.append(batch)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window
