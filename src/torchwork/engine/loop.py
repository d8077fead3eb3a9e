"""The loop ``fit`` runs: epochs, or a number of optimizer steps, with evaluations at each epoch's end or
every K steps, checkpoints at each evaluation, and an end that a resume finds again.

``fit(train, val, epochs=3)`` trains three epochs and evaluates at each epoch's end, as always.
``fit(train, {"train": train_eval, "val": val}, max_steps=2000, eval_every=250, eval_at_start=True)`` is
nanoGPT's shape (``max_iters``, ``eval_interval``, an evaluation at iteration 0): it trains exactly 2000
optimizer steps (with ``accumulate=k``, optimizer steps, not micro-batches), going through the train loader
as many times as needed, each pass reshuffled as an epoch is; stops mid-epoch at step 2000; evaluates both
sets at step 0, every 250 steps and at the end; and writes a checkpoint at each evaluation (not at step 0,
as nanoGPT) and at the end. Given both ``epochs`` and ``max_steps``, training stops at whichever comes
first. With ``eval_every`` the history holds one record per evaluation (``{"step": 250, "train/loss": ...,
"val/loss": ...}``), early stopping's patience counts evaluations, and ReduceLROnPlateau steps at each
evaluation; an epoch's end still steps a per-epoch scheduler and calls ``on_epoch_end``.

An evaluation between steps changes nothing in the training: every RNG stream and the train loader's own
generator are put back after it, so the weights do not depend on ``eval_every`` (a set may even be the train
loader itself). Resume is exact by step: a checkpoint holds the step, the data position and every RNG
stream, so a run killed mid-training or mid-evaluation continues bit for bit from its last checkpoint.

Example:
    >>> LoopPlan(max_steps=2000, eval_every=250).step_based
    True
    >>> LoopPlan(max_steps=0)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: max_steps=0: the number of optimizer steps to train (nanoGPT's max_iters); it must be an integer >= 1.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from torchwork.data.lengths import length_or_none
from torchwork.engine.callbacks import EarlyStopping
from torchwork.engine.carried_state import carried_values, warn_carried_state
from torchwork.engine.compiling import planned_steps
from torchwork.engine.epoch import train_epoch
from torchwork.engine.evaluation import EvaluationSets
from torchwork.engine.interrupt import InterruptFlag, TrainingInterrupted
from torchwork.engine.logged_names import LoggedNames
from torchwork.engine.progress import epoch_line, evaluation_line
from torchwork.errors import ConfigError
from torchwork.quoting import quote_value
from torchwork.runs.options import RunOptions
from torchwork.runs.rng import capture_rng, restore_rng

if TYPE_CHECKING:
    from torchwork.engine.trainer import Trainer
    from torchwork.runs.session import RunSession

LARGEST_COUNT = 2**63  # epochs and steps are 64-bit counters in a checkpoint
_MEANING = {"epochs": ("the number of epochs to train", 0),
            "max_steps": ("the number of optimizer steps to train (nanoGPT's max_iters)", 1),
            "eval_every": ("the optimizer steps between evaluations (nanoGPT's eval_interval)", 1)}


def _count(name: str, value: Any) -> int | None:
    """``value`` as an integer count (None stays None), or one line that says what it must be."""
    if value is None:
        return None
    meaning, least = _MEANING[name]
    try:
        count = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        count = None
    if count is None or count < least:
        raise ConfigError(f"{name}={quote_value(value)}: {meaning}; it must be an integer >= {least}.")
    if count >= LARGEST_COUNT:  # a checkpoint's counters are 64-bit: its resume would refuse the run
        raise ConfigError(f"{name}={quote_value(value)}: {meaning}; it must be below 2**63.")
    return count


@dataclasses.dataclass(frozen=True)
class LoopPlan:
    """How long ``fit`` trains and when it evaluates, checked when built (see the module).

    ``epochs``: None when not given (one epoch, unless ``max_steps`` is); ``max_steps``: optimizer steps in
    all, counted from the run's start (a resumed or second ``fit`` counts what was trained before);
    ``eval_every``: evaluate every K optimizer steps instead of at each epoch's end; ``eval_at_start``:
    evaluate before the first step too."""

    epochs: int | None = None
    max_steps: int | None = None
    eval_every: int | None = None
    eval_at_start: bool = False

    def __post_init__(self) -> None:
        for name in _MEANING:
            object.__setattr__(self, name, _count(name, getattr(self, name)))
        if not isinstance(self.eval_at_start, bool):
            raise ConfigError(f"eval_at_start={self.eval_at_start!r} must be True or False.")

    @property
    def step_based(self) -> bool:
        """Evaluations every ``eval_every`` steps (the history then holds one record per evaluation)."""
        return self.eval_every is not None

    @property
    def epochs_limit(self) -> int | None:
        """The epochs that end training (None: only ``max_steps`` does)."""
        if self.epochs is not None:
            return self.epochs
        return None if self.max_steps is not None else 1

    def epochs_planned(self, loader: Any, accumulate: int) -> int | None:
        """The epochs this plan trains on ``loader`` (the last may be partial); None when not known."""
        limit = self.epochs_limit
        per_epoch = self.steps_per_epoch(loader, accumulate)
        if self.max_steps is None or not per_epoch:
            return limit
        needed = -(-self.max_steps // per_epoch)
        return needed if limit is None else min(limit, needed)

    def planned_steps(self, loader: Any, accumulate: int) -> int | None:
        """The optimizer steps this plan trains on ``loader`` (None when not known)."""
        per_epoch, epochs = self.steps_per_epoch(loader, accumulate), self.epochs_limit
        in_epochs = per_epoch * epochs if per_epoch is not None and epochs is not None else None
        if self.max_steps is None or in_epochs is None:
            return in_epochs if self.max_steps is None else self.max_steps
        return min(self.max_steps, in_epochs)

    @staticmethod
    def steps_per_epoch(loader: Any, accumulate: int) -> int | None:
        return planned_steps(loader, 1, accumulate)

    def limit_line(self, loader: Any, accumulate: int) -> str | None:
        """Given both ``epochs`` and ``max_steps``, which one ends training on ``loader``, in a line (None:
        one of them is not given, they end it at the same step, or the loader's length is not known)."""
        per_epoch = self.steps_per_epoch(loader, accumulate)
        if self.epochs is None or self.max_steps is None or not per_epoch:
            return None
        in_epochs, steps = per_epoch * self.epochs, f"{per_epoch} steps per epoch"
        if self.max_steps < in_epochs:
            epoch = -(-self.max_steps // per_epoch)
            return (f"torchwork: max_steps={self.max_steps} ends training before epochs={self.epochs} does, at step "
                    f"{self.max_steps} in epoch {epoch} ({steps}): fit stops at whichever comes first")
        if in_epochs < self.max_steps:
            return (f"torchwork: epochs={self.epochs} ends training at step {in_epochs}, before max_steps="
                    f"{self.max_steps} ({steps}): fit stops at whichever comes first")
        return None

    def reached(self, step: int) -> bool:
        return self.max_steps is not None and step >= self.max_steps

    def manifest_fields(self) -> dict[str, Any]:
        """What the run's manifest records of this plan (nothing for plain epochs: manifests stay as they were)."""
        fields = {"max_steps": self.max_steps, "eval_every": self.eval_every}
        fields = {name: value for name, value in fields.items() if value is not None}
        return {**fields, "eval_at_start": True} if self.eval_at_start else fields


class TrainingLoop:
    """One ``fit``'s loop: built, and every setting checked, before anything trains. The Trainer's public
    parts do the work (``begin_epoch``, ``run_window``, ``end_epoch``, ``state_dict``); the loop owns what
    lives only while ``fit`` runs: the run's checkpoints and when they are written, and Ctrl-C."""

    def __init__(self, trainer: Trainer, val_loader: Any, epochs: Any, max_steps: Any, eval_every: Any,
                 eval_at_start: Any) -> None:
        self.trainer = trainer
        self.plan = LoopPlan(epochs, max_steps, eval_every, eval_at_start)
        self.sets = EvaluationSets.of(val_loader)
        if not self.sets and (self.plan.eval_every is not None or self.plan.eval_at_start):
            asked = f"eval_every={self.plan.eval_every}" if self.plan.eval_every is not None else "eval_at_start=True"
            raise ConfigError(f"{asked}, but fit has nothing to evaluate: pass val_loader (a loader, or several "
                              "by name: {'train': ..., 'val': ...}).")
        self.run_options = self._checked_monitors()
        self.train_loader: Any = None
        self.checkpoint_every: int | None = None  # mid-epoch checkpoints, when the run keeps checkpoints
        self.evaluated_at: int | None = None  # the step of the last evaluation
        self.stopped = False  # the loop ended training after a step, before its epoch's end
        self.session: RunSession | None = None  # the run folder, on rank 0 when the run keeps checkpoints
        self.checkpointing = False  # every rank takes part in a checkpoint (a collective under DDP)
        self.saved_at: tuple[int, int] | None = None  # (step, epoch) of the last checkpoint
        self.interrupt = InterruptFlag()
        self.carried: dict[str, Any] = {}  # what the step_fn held as fit started (engine/carried_state.py)

    def _checked_monitors(self) -> RunOptions:
        """Every metric a setting watches must be one the evaluations log (checked before any work); returns
        the run options with ``best.pt``'s monitor chosen: the selected set's loss for named sets."""
        trainer, sets, plan = self.trainer, self.sets, self.plan
        options = trainer.run_options
        if sets.named and options.checkpoint_monitor is None and trainer.run_dir is not None:
            if sets.default_monitor is None:
                raise ConfigError(f"evaluation sets {sets.names} and none named 'val': say which picks best.pt, "
                                  f"e.g. checkpoint_monitor=('{sets.names[0]}/loss', 'min').")
            options = dataclasses.replace(options, checkpoint_monitor=(sets.default_monitor, "min"))
        watched = [(f"early stopping's monitor={c.monitor!r}", c.monitor) for c in trainer.callbacks
                   if isinstance(c, EarlyStopping)]
        if trainer.run_dir is not None and options.checkpoint_monitor is not None:
            watched.append((f"checkpoint_monitor={options.checkpoint_monitor[0]!r}", options.checkpoint_monitor[0]))
        if isinstance(trainer.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            watched.append((f"plateau_monitor={trainer.plateau_monitor!r}", trainer.plateau_monitor))
        logged = LoggedNames.of(trainer, sets, plan.step_based)
        for setting, monitor in watched:
            problem = sets.monitor_problem(monitor, epoch_logs=not plan.step_based)
            if problem is not None:
                raise ConfigError(f"{setting} is no metric an evaluation logs: {problem}.")
            problem = logged.problem(monitor)  # the set is right: the name too? (a typo: "val_los")
            if problem is not None:
                raise ConfigError(f"{setting} is no metric this fit logs: {problem}.")
        return options

    # ------------------------------------------------------------------ the loop
    def run(self, train_loader: Any, session: RunSession | None) -> None:
        """Train until the plan ends or a callback stops training (what ``fit`` did with epochs before),
        checkpointing into ``session`` when the Trainer has a ``run_dir``; Ctrl-C (off under DDP) finishes
        the step, checkpoints and stops."""
        self.session, self.checkpointing = session, self.trainer.run_dir is not None
        with self.interrupt.installed(enabled=not self.trainer.world.is_distributed):
            self._train(train_loader)

    def _train(self, train_loader: Any) -> None:
        trainer, plan = self.trainer, self.plan
        self.train_loader, start = train_loader, trainer.global_step
        self.checkpoint_every = trainer.checkpoint_every_n_steps if self.checkpointing else None
        if plan.eval_at_start and trainer.global_step == 0 and not trainer.should_stop:
            self._record({"step": 0, **self._evaluate()})
        partial = None  # the summary of an epoch training stopped in
        while not self.done():
            if self.interrupt.raised:  # Ctrl-C during an evaluation: the epoch's checkpoint is written
                raise TrainingInterrupted(trainer.global_step, trainer.run_path if self.checkpointing else None)
            for sampler in (getattr(train_loader, "sampler", None), getattr(train_loader, "batch_sampler", None)):
                set_epoch = getattr(sampler, "set_epoch", None)
                if callable(set_epoch):
                    set_epoch(trainer.epoch)  # DistributedSampler reshuffles only when told the epoch
            trainer.modes.restore()
            if trainer.batch_in_epoch == 0:  # not when a resume continues an epoch: its state is in the checkpoint
                for callback in trainer.callbacks:
                    if hasattr(callback, "on_epoch_start"):
                        callback.on_epoch_start(trainer)
            logs = train_epoch(trainer, *trainer.begin_epoch(train_loader), self)
            if self.stopped and trainer.batch_in_epoch != length_or_none(train_loader):
                partial = logs
                break
            if self.sets and not plan.step_based:
                logs.update(self.sets.run(trainer))
                self.evaluated_at = trainer.global_step
                trainer.say(epoch_line(trainer.epoch + 1, trainer.epochs_planned, logs))
            trainer.end_epoch(logs)
            if self.checkpointing and not plan.step_based:
                self.save_checkpoint(logs)  # after the callbacks, so early stopping's state is in it
        if trainer.global_step > start:
            self._finish(partial)
        self._say_stop()

    def done(self) -> bool:
        trainer, limit = self.trainer, self.plan.epochs_limit
        return (trainer.should_stop or self.stopped or self.plan.reached(trainer.global_step)
                or (limit is not None and trainer.epoch >= limit))

    def due(self, step: int) -> bool:
        """Whether the step just taken needs :meth:`at_step` (an evaluation, a checkpoint, the end); cheap."""
        plan, every = self.plan, self.checkpoint_every
        return bool((every and step % every == 0) or (plan.eval_every and step % plan.eval_every == 0)
                    or plan.reached(step) or (plan.step_based and self.trainer.should_stop))

    def at_step(self) -> bool:
        """After an optimizer step :meth:`due` named: evaluate and checkpoint as the plan says; True when
        training ends at this step (the end's evaluation and checkpoint are :meth:`_finish`'s)."""
        trainer, plan = self.trainer, self.plan
        step = trainer.global_step
        if plan.reached(step) or (plan.step_based and trainer.should_stop):
            self.stopped = True
            return True
        metrics = None
        if plan.eval_every is not None and step % plan.eval_every == 0:
            metrics = self._evaluate()
            self._record({"step": step, **metrics})
            self.stopped = trainer.should_stop  # early stopping, at this evaluation
        every = self.checkpoint_every
        if self.checkpointing and (metrics is not None or (every and step % every == 0)):
            self.save_checkpoint(metrics)
        return self.stopped

    # ------------------------------------------------------------------ evaluations and the end
    def _evaluate(self) -> dict[str, float]:
        """Every set, between two steps, at the settled thread count; every RNG stream and the train loader's
        own generator are put back after it, so that the training does not depend on how often it evaluates
        (an epoch's end evaluates as it always did)."""
        trainer = self.trainer
        trainer.cpu_threads.pause()
        generator = getattr(self.train_loader, "generator", None)
        order = generator.get_state() if isinstance(generator, torch.Generator) else None
        streams = capture_rng()  # a loader's iterator draws its seed, a set may draw random windows
        metrics = self.sets.run(trainer)
        restore_rng(streams)
        if order is not None:
            generator.set_state(order)  # a set that iterates the train loader must not reorder its epoch
        self.evaluated_at = trainer.global_step
        if trainer.scheduler is not None and self.plan.step_based and isinstance(
                trainer.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            trainer.scheduler.step(metrics[trainer.plateau_monitor])
        return metrics

    def _record(self, record: dict[str, Any], history: bool | None = None) -> None:
        """An evaluation's record: to the loggers, said, and into the history when it holds evaluations."""
        trainer = self.trainer
        if history if history is not None else self.plan.step_based:
            trainer.history.append(record)
        for logger in trainer.loggers:
            logger.log(record, trainer.global_step)
        if not any(name.startswith("val_") or "/" in name for name in record):
            return  # nothing evaluated: an epoch training stopped in, without evaluation sets
        if "epoch" in record:
            trainer.say(epoch_line(record["epoch"], trainer.epochs_planned, record))
        else:
            total = f"/{self.plan.max_steps}" if self.plan.max_steps is not None else ""
            trainer.say(evaluation_line(f"step {record['step']}{total}", record))

    def _finish(self, partial: dict[str, Any] | None) -> None:
        """Training ended (the plan's end, or a stop): evaluate unless this step was, and checkpoint unless
        this step is. ``partial``: the summary of the epoch it stopped in (with epochs, a history record)."""
        trainer = self.trainer
        step = trainer.global_step
        metrics = self._evaluate() if self.sets and self.evaluated_at != step else None
        if partial is not None and not self.plan.step_based:
            self._record({**partial, "step": step, **(metrics or {})}, history=True)
        elif metrics is not None:
            self._record({"step": step, **metrics})
        if self.checkpointing and self.saved_at != (step, trainer.epoch):  # an epoch's end since: again
            self.save_checkpoint(metrics)

    # ------------------------------------------------------------------ checkpoints and Ctrl-C
    def watch_carried_state(self) -> None:
        """Fingerprint what the ``step_fn`` holds as ``fit`` starts: the first checkpoint names what changed."""
        self.carried = carried_values(self.trainer.step_fn)

    def save_checkpoint(self, metrics: dict[str, Any] | None = None) -> None:
        """A checkpoint of the Trainer now, with the evaluation's ``metrics`` (for ``best.pt``)."""
        trainer = self.trainer
        carried, self.carried = self.carried, {}
        if trainer.world.is_rank_zero:
            warn_carried_state(trainer.step_fn, carried)
        state = trainer.state_dict()  # a collective under DDP: every rank contributes its RNG state
        self.saved_at = (trainer.global_step, trainer.epoch)
        if self.session is not None:
            self.session.save(state, metrics)

    def stop_interrupted(self) -> NoReturn:
        """Ctrl-C: checkpoint the step just finished (when keeping a run) and stop with one line."""
        run = None
        if self.checkpointing:
            self.save_checkpoint()
            run = self.trainer.run_path
        raise TrainingInterrupted(self.trainer.global_step, run)

    def _say_stop(self) -> None:
        trainer, plan = self.trainer, self.plan
        if not trainer.should_stop:
            return
        reasons = [str(reason) for c in trainer.callbacks if (reason := getattr(c, "reason", None))]
        reasons = reasons or ([trainer.stop_reason] if trainer.stop_reason else [])  # restored by a resume
        why = "; ".join(reasons) if reasons else "a callback set trainer.should_stop"
        limit = plan.epochs_limit
        if self.stopped or plan.step_based:
            if not plan.reached(trainer.global_step):
                total = f" of {plan.max_steps}" if plan.max_steps is not None else ""
                trainer.say(f"torchwork: stopped at step {trainer.global_step}{total}: {why}")
        elif limit is None or trainer.epoch < limit:
            trainer.say(f"torchwork: stopped after epoch {trainer.epoch}" + (f" of {limit}" if limit else "")
                        + f": {why}")
