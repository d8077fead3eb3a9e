"""The Trainer: the training step done right, usable as a loop (``fit``) or one step at a time.

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torchwork import Trainer
    >>> model = nn.Linear(4, 2)
    >>> data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(3)]
    >>> trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
    ...                   device="cpu", progress=False)
    >>> history = trainer.fit(data, epochs=2)
    >>> [h["epoch"] for h in history]   # 1-based, as in the progress lines
    [1, 2]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from torchwork.distributed.env import World, world_from_env
from torchwork.engine.batches import call_model, concat_outputs, inputs_of, length_or_none
from torchwork.engine.callbacks import EarlyStopping
from torchwork.engine.checkpoint import TrainerCheckpoint
from torchwork.engine.compiling import Compiler, forward_backward
from torchwork.engine.devices import check_model_on, move_to_device, resolve_device
from torchwork.engine.interrupt import InterruptFlag, TrainingInterrupted
from torchwork.engine.loop import LoopPlan, TrainingLoop
from torchwork.engine.options import (
    DistributedOptions,
    EvaluationOptions,
    LoggingOptions,
    StepOptions,
    group_keywords,
)
from torchwork.engine.precision import keep_in_fp32, resolve_precision
from torchwork.engine.progress import ProgressBar
from torchwork.engine.step import ForwardLoss, LocalSync, StepResult, StepSetup, optimizer_step
from torchwork.engine.threads import cpu_reader, thread_setting, thread_tuner
from torchwork.errors import CheckpointError, ConfigError
from torchwork.runs.options import RunOptions
from torchwork.runs.resume import TrainingState
from torchwork.threads import CpuReader, ThreadChoice, ThreadTuner

if TYPE_CHECKING:
    from pathlib import Path

    from torch.nn.parallel import DistributedDataParallel
    from typing_extensions import Unpack

    from torchwork.engine.options import TrainerKeywords
    from torchwork.runs.manifest import RunDescription
    from torchwork.runs.session import RunSession

Tensor = torch.Tensor
LossFn = Callable[[Any, Any], Any]
StepFn = Callable[[nn.Module, Any], Any]
EvalSets = Iterable[Any] | Mapping[str, Iterable[Any]]  # fit's val_loader: one loader, or several by name


class _Setting:
    """A Trainer setting, read from its group in ``trainer.options`` (one home per setting: nothing is
    copied onto the Trainer). Read-only: a new value means a new group (``dataclasses.replace``)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, trainer: Any, owner: type | None = None) -> Any:
        if trainer is None:
            return self
        return getattr(trainer.options[self.group], self.name)

    def __set__(self, trainer: Any, value: Any) -> None:
        raise AttributeError(f"trainer.{self.name} is read from trainer.options[{self.group!r}]: build the Trainer "
                             f"with the new value ({self.name}=...), or replace the group with dataclasses.replace.")


class Trainer:
    """Trains ``model`` with ``optimizer`` on ``loss_fn(outputs, targets)``.

    Args:
        model: the module to train; moved to ``device``.
        optimizer: holds (some of) the model's parameters.
        loss_fn: ``loss_fn(outputs, targets)`` returning a scalar or a dict of named scalars.
        scheduler: an LR scheduler, stepped after every optimizer step or once per epoch as
            ``scheduler_interval`` says (``"auto"``: from what it counts, said when ``fit`` starts;
            ReduceLROnPlateau: once per epoch, on ``plateau_monitor``).
        device: ``"auto"`` (cuda, then mps, then cpu) or any device name.
        precision: ``"32"``, ``"bf16"`` (autocast, no scaler) or ``"fp16"`` (autocast + GradScaler).
        step_fn: ``step_fn(model, batch) -> loss`` replaces the ``(inputs, targets)`` convention.
        callbacks: objects with some of ``on_fit_start``, ``on_epoch_start``, ``on_step_end``,
            ``on_evaluate_start``, ``on_evaluate_end``, ``on_epoch_end``, ``on_fit_end``
            (:mod:`torchwork.engine.callbacks`).
        step: :class:`~torchwork.engine.options.StepOptions`: accumulate, clip_grad_norm, clip_grad_value,
            loss_weights, keep_fp32, compile (``compile="auto"``: torch.compile only when it measurably pays),
            threads (``"auto"``: chosen for the machine, see :mod:`torchwork.threads`; a count is always
            honoured; the choice is said on stderr with progress on and kept in ``trainer.thread_choice``).
        evaluation: :class:`~torchwork.engine.options.EvaluationOptions`: metrics, epoch_metrics,
            early_stopping, plateau_monitor.
        logging: :class:`~torchwork.engine.options.LoggingOptions`: log_every_n_steps, progress,
            progress_every_s, loggers.
        run: :class:`~torchwork.runs.options.RunOptions`: run_dir, checkpoint_every_n_steps,
            keep_checkpoints, checkpoint_monitor, config, tensorboard.
        distributed: :class:`~torchwork.engine.options.DistributedOptions` (enabled, timeout_s, debug), or
            a bool: run under torchrun as one DDP rank (default: when torchrun's WORLD_SIZE > 1).
        **keywords: any field of those groups by its name, flat (``accumulate=4``, ``run_dir="runs"``;
            ``distributed_timeout_s``, ``distributed_debug``), typed by
            :class:`~torchwork.engine.options.TrainerKeywords` so that a type checker flags a misspelt one.
        guard: run the doctor's cheap checks during training (non-finite loss, exploding gradients,
            BatchNorm on one sample, modes, fp16 scale collapse); findings warn once and are kept in
            ``trainer.guard.findings``.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn | None = None,
                 scheduler: Any = None, *, device: str | torch.device = "auto", precision: str = "32",
                 step_fn: StepFn | None = None, callbacks: Sequence[Any] = (), guard: bool = True,
                 step: StepOptions | None = None, evaluation: EvaluationOptions | None = None,
                 logging: LoggingOptions | None = None, run: RunOptions | None = None,
                 distributed: DistributedOptions | bool | None = None,
                 **keywords: Unpack[TrainerKeywords]) -> None:
        if not isinstance(model, nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        groups = group_keywords(keywords, step=step, evaluation=evaluation, logging=logging, run=run,
                                distributed=distributed)
        step, evaluation, logging, run = groups["step"], groups["evaluation"], groups["logging"], groups["run"]
        if loss_fn is None and step_fn is None:
            raise ConfigError("Trainer needs loss_fn(outputs, targets) or step_fn(model, batch) -> loss.")

        dist_options: DistributedOptions = groups["distributed"]
        self.world = world_from_env() if dist_options.enabled is not False else World()
        if self.world.is_distributed:
            from torchwork.distributed import setup as dist_setup

            dist_setup.init_process_group(self.world, dist_options.timeout_s, dist_options.resolved_debug())
            if device == "auto" and torch.cuda.is_available():
                device = f"cuda:{self.world.local_rank}"  # one GPU per process
        self.device = resolve_device(device)
        self._thread_tuner: ThreadTuner | None = None
        self._cpu_reader: CpuReader | None = None
        self._iteration_started: float | None = None  # None: the next step starts a timed iteration afresh
        self._threads_auto, self._thread_choice = thread_setting(step.threads, self.device, self.world)
        self.model = model.to(self.device)
        check_model_on(self.model, self.device)
        # One micro-batch's forward pass and loss, checked (engine/step.py). What it calls: the model itself,
        # or its DDP wrapper (which all-reduces gradients), or its compiled form (see _train_model).
        self._forward = ForwardLoss(self.model, self.device, loss_fn, step_fn, step.loss_weights)
        self._ddp = None
        if self.world.is_distributed:
            self._ddp = self._train_model = dist_setup.wrap_ddp(self.model, self.device)
        self._compiler = Compiler(step.compile, distributed=self.world.is_distributed)
        if isinstance(loss_fn, nn.Module):
            loss_fn.to(self.device)  # e.g. CrossEntropyLoss(weight=...) whose weights live on the CPU
        self.optimizer = optimizer
        self._check_optimizer(model, optimizer)
        self.loss_fn, self.step_fn, self.scheduler = loss_fn, step_fn, scheduler
        self._plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        from torchwork.schedules import SchedulePlan, scheduler_interval

        # Checked now (ReduceLROnPlateau per step is refused). "auto" is decided when fit knows the epochs;
        # until then (a loop of the user's own, calling trainer.step) the scheduler steps per step, as before.
        self._schedule: SchedulePlan | None = None
        if scheduler is not None:
            asked = step.scheduler_interval
            self._schedule = (SchedulePlan("auto", "decided when fit starts") if asked == "auto" and not self._plateau
                              else scheduler_interval(scheduler, asked))
        self.precision = resolve_precision(precision, self.device)
        self.scaler = self.precision.scaler
        keep_fp32 = step.keep_fp32
        self._fp32_hooks = keep_in_fp32(model, keep_fp32, self.device.type) if keep_fp32 else []
        early_stopping = evaluation.early_stopping
        if isinstance(early_stopping, str):
            mode = "min" if "loss" in early_stopping else "max"
            early_stopping = EarlyStopping(monitor=early_stopping, mode=mode)
        evaluation = dataclasses.replace(evaluation, early_stopping=early_stopping)
        self.callbacks = [*callbacks, *([early_stopping] if early_stopping is not None else [])]
        self.loggers = list(logging.loggers)  # in use now: fit adds the run folder's while it runs
        self._epochs_total: int | None = None
        self.loop: LoopPlan | None = None  # how long the running (or last) fit trains, when it evaluates
        self._saved_at: tuple[int, int] | None = None  # (step, epoch) of the last checkpoint
        if run.checkpoint_monitor is None and early_stopping is not None:
            run = dataclasses.replace(run, checkpoint_monitor=(early_stopping.monitor, early_stopping.mode))
        # every setting, by group, resolved (an early-stopping metric name made an EarlyStopping, best.pt's
        # monitor defaulted to it): read from here by the properties below, never copied onto the Trainer
        self.options = {**groups, "evaluation": evaluation, "run": run}
        self.run_path: Path | None = None  # set by fit() when run_dir is given
        self.guard = None
        if guard:
            from torchwork.doctor.guard import attach_guard

            self.guard = attach_guard(self)
            self.callbacks.append(self.guard)  # its on_epoch_end checks the epoch's last partial window
        self._session: RunSession | None = None
        self._step = self._step_setup()

        # Where training is (counters, data position, RNG streams): saved in every checkpoint.
        self.state = TrainingState()
        self.should_stop = False
        self.stop_reason: str | None = None  # why a resumed run had stopped (its checkpoint's ``stopped``)
        self._train_modes: list[bool] | None = None
        self._last_grad_norm: Tensor | None = None
        self._totals: dict[str, Any] = {}
        self._checkpointing = False
        self._interrupt = InterruptFlag()
        self._carried: dict[str, Any] = {}

    # ------------------------------------------------------------------ settings, each read from its group
    accumulate = _Setting("step")
    clip_grad_norm = _Setting("step")
    clip_grad_value = _Setting("step")
    loss_weights = _Setting("step")
    scheduler_interval = _Setting("step")
    metrics = _Setting("evaluation")
    epoch_metrics = _Setting("evaluation")
    early_stopping = _Setting("evaluation")
    plateau_monitor = _Setting("evaluation")
    log_every_n_steps = _Setting("logging")
    progress = _Setting("logging")
    progress_every_s = _Setting("logging")
    run_dir = _Setting("run")
    checkpoint_every_n_steps = _Setting("run")
    keep_checkpoints = _Setting("run")
    checkpoint_monitor = _Setting("run")
    config = _Setting("run")
    tensorboard = _Setting("run")

    @property
    def run_options(self) -> RunOptions:
        """Where this Trainer keeps its runs, and how it checkpoints (``options["run"]``)."""
        return cast(RunOptions, self.options["run"])

    @property
    def _train_model(self) -> nn.Module:
        """What the training step calls: the model, its DDP wrapper or its compiled form."""
        return self._forward.model

    @_train_model.setter
    def _train_model(self, module: nn.Module) -> None:
        self._forward.model = module

    def _forward_loss(self, batch: Any) -> tuple[Tensor, int]:
        """One micro-batch's forward pass and loss (what the compile measurement runs)."""
        return self._forward(batch)

    # ------------------------------------------------------------------ where training is (self.state)
    @property
    def epochs_planned(self) -> int | None:
        """The ``epochs`` of the running (or last) ``fit`` (None before the first)."""
        return self._epochs_total

    @property
    def global_step(self) -> int:
        """Optimizer steps attempted (``self.state.global_step``)."""
        return self.state.global_step

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.state.global_step = value

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps a GradScaler skipped for inf/NaN gradients."""
        return self.state.skipped_steps

    @skipped_steps.setter
    def skipped_steps(self, value: int) -> None:
        self.state.skipped_steps = value

    @property
    def epoch(self) -> int:
        """Epochs completed: the current epoch, 0-based (the history and the progress lines count from 1)."""
        return self.state.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.state.epoch = value

    @property
    def batch_in_epoch(self) -> int:
        """Micro-batches of the current epoch already trained on."""
        return self.state.batch_in_epoch

    @batch_in_epoch.setter
    def batch_in_epoch(self, value: int) -> None:
        self.state.batch_in_epoch = value

    @property
    def history(self) -> list[dict[str, Any]]:
        """The per-epoch metrics so far."""
        return self.state.history

    @history.setter
    def history(self, value: list[dict[str, Any]]) -> None:
        self.state.history = value

    # ------------------------------------------------------------------ the step (engine/step.py)
    def _step_setup(self) -> StepSetup:
        if self._ddp is not None:
            from torchwork.distributed.sync import DDPSync

            sync: Any = DDPSync(cast("DistributedDataParallel", self._ddp), self.world, self.device)
        else:
            sync = LocalSync()
        return StepSetup(self.optimizer, self.precision, sync, self._forward, self._forward.samples_in,
                         self.clip_grad_norm, self.clip_grad_value, self._per_step_scheduler())

    def _per_step_scheduler(self) -> Any:
        """The scheduler the optimizer step steps: None when it steps per epoch or on a plateau."""
        plan = self._schedule
        return self.scheduler if plan is not None and plan.interval in ("step", "auto") else None

    def _plan_schedule(self, train_loader: Any, epochs: int | None) -> None:
        """Decide ``scheduler_interval="auto"`` for this run (its epochs and steps per epoch) and say it."""
        if self.scheduler is None or self._plateau:
            return
        from torchwork.schedules import scheduler_interval

        batches = length_or_none(train_loader)
        steps_per_epoch = -(-batches // self.accumulate) if batches is not None else None
        self._schedule = scheduler_interval(self.scheduler, self.scheduler_interval, epochs=epochs,
                                            steps_per_epoch=steps_per_epoch)
        self._step.scheduler = self._per_step_scheduler()
        self._say(f"scheduler: stepped {'once per epoch' if self._schedule.interval == 'epoch' else 'per step'} "
                  f"({self._schedule.reason})")

    @property
    def thread_choice(self) -> ThreadChoice | None:
        """torch's thread count and why (None with ``threads="auto"`` off the CPU, or before the first step)."""
        return self._thread_tuner.choice if self._thread_tuner is not None else self._thread_choice

    def _run_window(self, window: Sequence[Any]) -> StepResult:
        """One optimizer step over the micro-batches of ``window`` (:func:`optimizer_step`), counted."""
        if self._compiler.pending:
            self._train_model = self._compiler.choose(self._train_model, self.model, forward_backward(self, window[0]),
                                                      self.state.global_step)
            if self._threads_auto and (self._compiler.decision or {}).get("compiled"):
                self._fix_threads_for_compiled()
        tuner = self._thread_tuner
        if tuner is None and self._threads_auto:
            planned = self._compiler.planned_steps  # the fit's; timing candidates takes at most 5% of what is left
            tuner = self._thread_tuner = thread_tuner(
                self.world, self._say, None if planned is None else max(0, planned - self.state.global_step),
                self._cpu_reader)
        if tuner is not None and self._iteration_started is None:
            tuner.before_step()
            self._iteration_started = time.perf_counter()
        result = optimizer_step(self._step, window)
        if tuner is not None and self._iteration_started is not None:
            # A whole iteration is timed, from here to here: this step, then the loop's own work and the
            # next batch's fetch, all at the count set now (the bare step favoured 2 threads where the
            # whole loop ran faster on 1).
            tuner.after_step(time.perf_counter() - self._iteration_started, result.samples)
            tuner.before_step()
            self._iteration_started = time.perf_counter()
        self._last_grad_norm = result.grad_norm
        state = self.state
        if not result.stepped:
            state.skipped_steps += 1
        state.global_step += 1
        return result

    def _fix_threads_for_compiled(self) -> None:
        """A compiled model's graphs are guarded on torch's thread count (a change recompiles them): under
        ``threads="auto"`` the count is chosen once, for the machine as it is now, and kept."""
        from torchwork.threads import choose_threads

        choice = choose_threads("auto")
        choice.reason += "; kept while compiled (a change of thread count recompiles)"
        self._keep_threads(choice)

    def _keep_threads(self, choice: ThreadChoice) -> None:
        """Under ``threads="auto"``, stop tuning and run with ``choice`` from now on (said with progress on)."""
        from torchwork.threads import set_threads

        self._threads_auto, self._thread_tuner, self._thread_choice = False, None, choice
        set_threads(choice.threads)
        self._say(choice.describe())

    def _all_reduce_sum(self, values: list[float]) -> list[float]:
        from torchwork.distributed.setup import all_reduce_sum

        return all_reduce_sum(values, self.device)

    # ------------------------------------------------------------------ public step API
    def step(self, *batches: Any) -> Tensor:
        """Run one optimizer step over one batch, or over several micro-batches (accumulated exactly).

        For users who keep their own loop; returns the detached loss (the window's sample mean).
        """
        if not batches:
            raise ConfigError("trainer.step() needs at least one batch.")
        result = self._run_window(batches)
        if self.guard is not None:  # a user's own loop gets the guard's per-step checks, not fit's callbacks
            self.guard.on_step_end(self, self._step_logs_of(result))
        return result.loss

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a checkpoint of everything :meth:`state_dict` holds to ``path``: atomically, with its
        SHA-256 checksum beside it, in the format of ``fit``'s checkpoints (``fit(resume=path)`` continues
        from it). Under DDP every rank calls it (a collective) and rank 0 writes.

        Example:
            >>> import tempfile, pathlib, torch
            >>> from torch import nn
            >>> from torchwork import Trainer
            >>> model = nn.Linear(4, 1)
            >>> trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), device="cpu")
            >>> _ = trainer.step((torch.randn(8, 4), torch.randn(8, 1)))
            >>> path = pathlib.Path(tempfile.mkdtemp()) / "mine.pt"
            >>> trainer.save(path); trainer.load(path); trainer.global_step
            1
        """
        from torchwork.runs.checkpoint import save_checkpoint

        state = self.state_dict()
        problem = None
        if self.world.is_rank_zero:
            try:
                save_checkpoint(state, path)
            except CheckpointError as error:
                problem = error
        if self.world.is_distributed:
            from torchwork.distributed.setup import broadcast_object

            # every rank waits for rank 0's write (a load right after a save finds the file), and fails with it
            message = broadcast_object(str(problem) if problem is not None else None)
            if message is not None and problem is None:
                raise CheckpointError(f"rank 0 could not write {path}: {message}")
        if problem is not None:
            raise problem

    def load(self, path: str | os.PathLike[str]) -> None:
        """Continue from a checkpoint written by :meth:`save` or by ``fit``: its checksum is verified and it
        is read with ``torch.load(weights_only=True)`` (nothing in it is executed). Under DDP every rank
        calls it: rank 0 reads the file and sends it to the others (no shared filesystem needed)."""
        from torchwork.runs.checkpoint import load_checkpoint

        if not self.world.is_distributed:
            self.load_state_dict(load_checkpoint(path, map_location=self.device))
            return
        from torchwork.distributed.setup import broadcast_object

        state, message = None, None
        if self.world.is_rank_zero:
            try:
                state = load_checkpoint(path, map_location="cpu")
            except CheckpointError as error:
                message = str(error)
        state, message = broadcast_object((state, message))
        if message is not None:
            raise CheckpointError(message if self.world.is_rank_zero else f"rank 0 could not load {path}: {message}")
        self.load_state_dict(move_to_device(state, self.device))

    # ------------------------------------------------------------------ the loop
    def fit(self, train_loader: Iterable[Any], val_loader: EvalSets | None = None, epochs: int | None = None,
            resume: str | os.PathLike[str] | None = None, *, max_steps: int | None = None,
            eval_every: int | None = None, eval_at_start: bool = False) -> list[dict[str, Any]]:
        """Train ``epochs`` epochs or ``max_steps`` steps (:mod:`torchwork.engine.loop`); returns the history.

        ``resume``: ``"latest"`` continues the newest run under ``run_dir`` from its newest valid
        checkpoint (a no-op when there is none), a run folder or checkpoint path resumes from that.
        A run that differs from this training (model, optimizer, schedule, config, data) is not resumed.
        The environment variable ``TORCHWORK_RESUME`` (set by ``torchwork resume``) names the run to continue:
        the first ``fit`` of the process continues it, a later one its own run nested in it
        (:mod:`torchwork.runs.lineage`).
        """
        from torchwork.runs.lineage import resume_target

        loop = TrainingLoop(self, val_loader, epochs, max_steps, eval_every, eval_at_start)  # checked first
        resume = resume_target(resume, self.run_dir) if self.world.is_rank_zero else resume
        self.should_stop, self.stop_reason, self.loop = False, None, loop.plan
        self._epochs_total = loop.plan.epochs_planned(train_loader, self.accumulate)
        self._compiler.planned_steps = loop.plan.planned_steps(train_loader, self.accumulate)
        if self._thread_tuner is not None:  # another fit of this Trainer: its steps widen the timing budget
            planned = self._compiler.planned_steps
            self._thread_tuner.extend_plan(None if planned is None else max(0, planned - self.state.global_step))
        elif self._threads_auto:
            self._cpu_reader = cpu_reader()  # the neighbours' CPU, read from here to the first step
        self._plan_schedule(train_loader, self._epochs_total)
        if self.world.is_distributed:
            from torchwork.distributed.setup import check_same_length, shard_loader
            from torchwork.seeding import current_seed

            seed = cast(int, current_seed()["seed"] or 0)
            train_loader = shard_loader(train_loader, self.world, train=True, seed=seed)
            check_same_length(length_or_none(train_loader), self.device)
        self._capture_train_modes()
        from torchwork.engine.carried_state import carried_values

        self._carried = carried_values(self.step_fn)  # what the first checkpoint compares with
        state = self._open_run(train_loader, loop, resume)
        if state is not None:
            try:
                self.load_state_dict(state)
            except BaseException:
                if self._session is not None:  # a failed resume leaves the run's record as it was
                    self._session.close()
                    self._session = None
                raise
            if self._session is not None:
                self._session.record_resume()
        loggers_before = self.loggers
        if not self.world.is_rank_zero:
            self.loggers = []  # rank 0 speaks for the job
        if self._session is not None:
            self.loggers = [*self.loggers, *self._session.loggers]
        try:
            for callback in self.callbacks:
                if hasattr(callback, "on_fit_start"):
                    callback.on_fit_start(self)
            with self._interrupt.installed(enabled=not self.world.is_distributed):
                loop.run(train_loader)
            for callback in self.callbacks:
                if hasattr(callback, "on_fit_end"):
                    callback.on_fit_end(self)
        except RuntimeError as error:
            if self.world.is_distributed:
                from torchwork.distributed.setup import explain_collective_error

                explained = explain_collective_error(error)
                if explained is not None:
                    raise explained from error
            raise
        finally:
            self.loggers = loggers_before
            self._compiler.finish(self.run_path)
            if self._session is not None:
                self._session.close()
                self._session = None
        return self.history

    def _say(self, line: str) -> None:
        """A line on stderr from rank 0, when progress is shown."""
        if self.progress is not False and self.world.is_rank_zero:
            print(line, file=sys.stderr, flush=True)

    def _stop_interrupted(self) -> None:
        """Ctrl-C: checkpoint the step just finished (when keeping a run) and stop with one line."""
        run = None
        if self._checkpointing:
            self._save_checkpoint()
            run = self.run_path
        raise TrainingInterrupted(self.global_step, run)

    def _open_run(self, train_loader: Any, loop: TrainingLoop, resume: Any) -> dict[str, Any] | None:
        """Open the run folder (rank 0 only) and load the checkpoint to resume from, if any."""
        self._checkpointing = self.run_dir is not None
        state = None
        if self.run_dir is not None:
            if self.world.is_rank_zero:
                from torchwork.runs.session import RunSession

                self._session, state = RunSession.open(loop.run_options, self._description(), train_loader,
                                                       loop.sets.manifest_loader, self._epochs_total, resume,
                                                       self.device)
                self.run_path = self._session.path
        elif resume not in (None, "latest") and self.world.is_rank_zero:
            from torchwork.runs.checkpoint import load_checkpoint
            from torchwork.runs.session import find_resume_checkpoint

            _, checkpoint = find_resume_checkpoint(resume, None)
            if checkpoint is None:
                raise CheckpointError(f"resume={str(resume)!r}: no checkpoint found there.")
            state = load_checkpoint(checkpoint, map_location=self.device)
        if self.world.is_distributed:
            # Only rank 0 touches the run folder; the others get its path and the checkpoint from it, so
            # nodes need no shared filesystem.
            from torchwork.distributed.setup import broadcast_object

            run_path, state = broadcast_object((self.run_path, state))
            self.run_path = run_path
            if state is not None:
                state = move_to_device(state, self.device)
        return state

    def _description(self) -> RunDescription:
        """What the manifest records about this training."""
        from torchwork.runs.manifest import RunDescription

        return RunDescription(self.model, self.optimizer, self.scheduler, {
            "precision": self.precision.name, "accumulate": self.accumulate,
            "clip_grad_norm": self.clip_grad_norm, "clip_grad_value": self.clip_grad_value,
            "loss_weights": self.loss_weights, "device": str(self.device),
            "checkpoint_every_n_steps": self.checkpoint_every_n_steps, "keep_checkpoints": self.keep_checkpoints,
            **(self.loop.manifest_fields() if self.loop is not None else {})})

    def _epoch_batches(self, loader: Iterable[Any]) -> Iterable[Any]:
        """The epoch's batch iterator, positioned after the batches a resumed checkpoint already trained."""
        if self.state.batch_in_epoch == 0:
            self._totals = _new_totals(self.device)
            self._totals["skipped_at_start"] = self.state.skipped_steps
        return self.state.epoch_batches(loader, remember_epoch_start=self.run_dir is not None)

    def _train_epoch(self, batches: Iterable[Any], loop: TrainingLoop) -> dict[str, Any]:
        started = time.perf_counter()
        totals = self._totals
        self._forward.terms = None
        on_step = [c.on_step_end for c in self.callbacks if hasattr(c, "on_step_end")]
        batches_total = length_or_none(batches)
        windows_total = -(-batches_total // self.accumulate) if batches_total is not None else None
        bar = ProgressBar(windows_total, enabled=self.progress if self.world.is_rank_zero else False,
                          epoch=self.epoch, epochs=self._epochs_total, every_s=self.progress_every_s)
        show_bar = bar.enabled
        state, loggers, loss_sum = self.state, self.loggers, totals["loss_sum"]
        self._iteration_started = None  # the epoch's first fetch (workers starting) is not a step's time
        for window in _windows(batches, self.accumulate):
            result = self._run_window(window)
            loss, samples = result.loss, result.samples
            state.batch_in_epoch += len(window)
            loss_sum.add_(loss, alpha=samples)  # one op, not a product and a sum
            totals["samples"] += samples
            totals["steps"] += 1
            if self._forward.terms is not None:
                terms = totals["terms"]
                for name, value in self._forward.terms.items():
                    terms[name] = terms.get(name, 0) + value * samples
            if result.grad_norm is not None:
                totals["norm_sum"] += result.grad_norm
            if show_bar:
                bar.update(samples, loss)  # read (a device sync) only when a line is drawn
            if loggers and state.global_step % self.log_every_n_steps == 0:
                logs = self._step_logs(loss)
                for logger in loggers:
                    logger.log(logs, self.global_step)
            if on_step:
                step_logs = self._step_logs_of(result)
                for callback in on_step:
                    callback(self, step_logs)
            if loop.due(state.global_step):  # an evaluation, a checkpoint, or the end (max_steps, a stop)
                totals["elapsed"] += time.perf_counter() - started
                ends = loop.at_step()
                started = time.perf_counter()
                self._iteration_started = None
                if ends:
                    break
            if self._interrupt.raised:
                totals["elapsed"] += time.perf_counter() - started
                bar.close()
                self._stop_interrupted()
        bar.close()
        totals["elapsed"] += time.perf_counter() - started
        if self._thread_tuner is not None:
            self._thread_tuner.pause()  # validation, and whatever follows the run, at the chosen count
        steps = totals["steps"]
        if steps == 0:
            raise ConfigError("the training loader yielded no batches: check the dataset length, "
                              "batch_size and drop_last.")
        term_names = sorted(totals["terms"])
        sums = [float(totals["loss_sum"]), totals["samples"], *(float(totals["terms"][n]) for n in term_names)]
        if self.world.is_distributed:
            sums = self._all_reduce_sum(sums)  # every rank reports the job's numbers
        samples_seen = int(sums[1])
        logs = {"epoch": self.epoch + 1, "train_loss": sums[0] / samples_seen}  # 1-based, as a person reads it
        for name, value in zip(term_names, sums[2:]):
            logs[f"train_{name}"] = value / samples_seen
        logs.update(steps=steps, samples=samples_seen, time_s=totals["elapsed"],
                    samples_per_s=samples_seen / max(totals["elapsed"], 1e-9),
                    lr=self.optimizer.param_groups[0]["lr"])
        if self.clip_grad_norm is not None:
            logs["grad_norm"] = float(totals["norm_sum"]) / steps
        if self.scaler is not None:
            logs.update(skipped_steps=self.skipped_steps - totals["skipped_at_start"],
                        scale=self.scaler.get_scale())
        return logs

    def _step_logs_of(self, result: StepResult) -> dict[str, Any]:
        """What ``on_step_end`` gets at every step: tensors stay tensors, so that a callback (the guard
        included) costs no device sync unless it reads them."""
        state = self.state
        return {"step": state.global_step, "epoch": state.epoch + 1, "loss": result.loss,
                "grad_norm": result.grad_norm, "skipped": not result.stepped, "batch_size": result.smallest}

    def _step_logs(self, loss: Tensor) -> dict[str, Any]:
        logs: dict[str, Any] = {"step": self.global_step, "epoch": self.epoch + 1, "loss": float(loss),
                                "lr": self.optimizer.param_groups[0]["lr"]}
        if self._forward.terms is not None:
            logs.update({f"loss_{k}": float(v) for k, v in self._forward.terms.items()})
        if self._last_grad_norm is not None:
            logs["grad_norm"] = float(self._last_grad_norm)
        if self.scaler is not None:
            logs.update(scale=self.scaler.get_scale(), skipped_steps=self.skipped_steps)
        return logs

    def _end_epoch(self, logs: dict[str, Any]) -> None:
        step_based = self.loop is not None and self.loop.step_based  # then evaluations fill the history
        if self._plateau and not step_based:
            if self.plateau_monitor not in logs:
                raise ConfigError(f"ReduceLROnPlateau needs {self.plateau_monitor!r}, but the epoch "
                                  f"logged {sorted(logs)}. Pass a val_loader or plateau_monitor=.")
            self.scheduler.step(logs[self.plateau_monitor])
        elif self._schedule is not None and self._schedule.interval == "epoch":
            self.scheduler.step()  # before the epoch's checkpoint, which must hold the stepped schedule
        if not step_based:
            self.history.append(logs)
        for logger in self.loggers:
            logger.log(logs, self.global_step)
        for callback in self.callbacks:
            if hasattr(callback, "on_epoch_end"):
                callback.on_epoch_end(self, logs)
        self.epoch += 1
        self.batch_in_epoch = 0
        if self._checkpointing and not step_based:
            self._save_checkpoint(logs)  # after the callbacks, so early stopping's state is in it

    def _save_checkpoint(self, metrics: dict[str, Any] | None = None) -> None:
        self._warn_carried_state()
        state = self.state_dict()  # a collective under DDP: every rank contributes its RNG state
        self._saved_at = (self.global_step, self.epoch)
        if self._session is not None:
            self._session.save(state, metrics)

    def _warn_carried_state(self) -> None:
        """At the first checkpoint: name the state a ``step_fn`` carried that the checkpoint does not hold."""
        from torchwork.engine.carried_state import changed_state

        carried, self._carried = self._carried, {}
        names = changed_state(self.step_fn, carried)
        if names and self.world.is_rank_zero:
            warnings.warn(f"step_fn carries {', '.join(names)} from batch to batch, and the checkpoints do not "
                          "hold it: a resume restarts it from its first value and will not be exact. Give the "
                          "step_fn object state_dict() and load_state_dict() (a class with __call__), and the "
                          "checkpoints save and restore it.", stacklevel=2)

    # ------------------------------------------------------------------ state (checkpoints)
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly: weights, optimizer, scheduler, scaler, every
        RNG stream, the data position, counters, history and callback state (a
        :class:`~torchwork.engine.checkpoint.TrainerCheckpoint`, as the dict written to disk)."""
        return TrainerCheckpoint.capture(self).state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (every RNG stream included); every field is checked
        before anything is touched."""
        TrainerCheckpoint.from_state_dict(state, "given to load_state_dict").restore(self)

    # ------------------------------------------------------------------ modes
    def _capture_train_modes(self) -> None:
        """Remember each submodule's training flag, so that a frozen BatchNorm stays in eval."""
        if not self.model.training:
            self.model.train()  # the whole model was left in eval (e.g. after loading): train it all
        self._train_modes = [m.training for m in self.model.modules()]

    def _restore_train_modes(self) -> None:
        if self._train_modes is None:
            self.model.train()
        else:
            for module, mode in zip(self.model.modules(), self._train_modes):
                module.training = mode
        keep_frozen_norms_in_eval(self.model)

    @contextlib.contextmanager
    def evaluating(self) -> Any:
        """``model.eval()`` + ``torch.inference_mode()`` (+ autocast), restoring every submodule's mode."""
        modes = [m.training for m in self.model.modules()]
        self.model.eval()
        try:
            with torch.inference_mode(), self.precision.autocast():
                yield
        finally:
            for module, mode in zip(self.model.modules(), modes):
                module.training = mode

    def evaluate(self, loader: Iterable[Any], prefix: str = "") -> dict[str, float]:
        """Mean loss (and ``metrics``) over ``loader``, weighted by batch size, plus ``epoch_metrics`` over
        all of it, in eval mode (:func:`torchwork.engine.evaluation.evaluate_loader`)."""
        from torchwork.engine.evaluation import evaluate_loader

        return evaluate_loader(self, loader, prefix)

    def predict(self, loader: Iterable[Any]) -> Any:
        """Model outputs for every batch, on the CPU, joined along dimension 0. Batch size 1 works.

        A batch may be an ``(inputs, targets)`` pair, a 1-tuple ``(inputs,)``, or the inputs themselves.
        """
        outputs = []
        with self.evaluating():
            for batch in loader:
                inputs = move_to_device(inputs_of(batch), self.device)
                outputs.append(move_to_device(call_model(self.model, inputs), torch.device("cpu")))
        return concat_outputs(outputs)

    # ------------------------------------------------------------------ checks and explanations
    @staticmethod
    def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}.")
        in_optimizer = [p for group in optimizer.param_groups for p in group["params"]]
        model_ids = {id(p) for p in model.parameters()}
        optimized = {id(p) for p in in_optimizer}
        if not model_ids & optimized:
            raise ConfigError(
                "the optimizer holds none of the model's parameters, so training would change nothing. "
                "Build it from this model after creating it: torch.optim.AdamW(model.parameters(), ...). "
                "(A model re-created or deep-copied after the optimizer has new parameter objects.)")
        forgotten = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in optimized]
        if forgotten:
            warnings.warn(f"{len(forgotten)} trainable parameter(s) are not in the optimizer and will not "
                          f"change (e.g. {forgotten[:3]}). Freeze them with requires_grad_(False) if that "
                          "is intended.", stacklevel=3)

    def explain(self) -> str:
        """The exact order of one training step for the current settings, as text (``print`` it)."""
        p, k = self.precision, self.accumulate
        lines = [f"One optimizer step on {self.device} (precision={p.name}, accumulate={k}):"]
        n = 1
        lines.append(f"  {n}. optimizer.zero_grad(set_to_none=True)")
        each = "for each of the k micro-batches (fewer at the end of an epoch):" if k > 1 else "for the batch:"
        lines.append(f"  {n + 1}. {each}")
        forward = f"under torch.autocast({p.device_type!r}, dtype={p.dtype})" if p.dtype else "in float32"
        lines.append(f"     a. move the batch to {self.device}; outputs = model(inputs) {forward}")
        loss = "step_fn(model, batch)" if self.step_fn else "loss_fn(outputs, targets)"
        if self.loss_weights:
            loss += f", named losses combined with weights {self.loss_weights}"
        lines.append(f"     b. loss = {loss}")
        if k > 1:
            lines.append("     c. loss *= samples in this micro-batch / samples in the window (exact mean)")
        backward = "scaler.scale(loss).backward()" if self.scaler else "loss.backward()"
        lines.append(f"     {'d' if k > 1 else 'c'}. {backward}")
        after = []
        if self.scaler:
            after.append("scaler.unscale_(optimizer): gradients back to their true size")
        if self.clip_grad_norm is not None:
            after.append(f"clip_grad_norm_(max_norm={self.clip_grad_norm}); the pre-clip norm is logged")
        if self.clip_grad_value is not None:
            after.append(f"clip_grad_value_({self.clip_grad_value})")
        if self.scaler:
            after.append("scaler.step(optimizer): skipped when gradients hold inf/NaN")
            after.append("scaler.update(): shrink the scale after a skip, grow it after many good steps")
        else:
            after.append("optimizer.step()")
        if self._per_step_scheduler() is not None:
            after.append("scheduler.step() (once per optimizer step)")
        lines.extend(f"  {number}. {text}" for number, text in enumerate(after, start=3))
        if self._plateau:
            lines.append(f"  once per epoch: scheduler.step({self.plateau_monitor})")
        elif self._schedule is not None and self._schedule.interval == "epoch":
            lines.append(f"  once per epoch: scheduler.step() ({self._schedule.reason})")
        lines.append(f"  every {self.log_every_n_steps} steps: log loss, lr"
                     + (", grad_norm" if self.clip_grad_norm else "") + (", scale" if self.scaler else ""))
        return "\n".join(lines)



def keep_frozen_norms_in_eval(model: nn.Module) -> list[str]:
    """Put every BatchNorm whose parameters are all frozen (``requires_grad=False``) in eval mode, so that
    its running statistics do not drift while the rest trains; returns their names. ``fit`` calls it at
    each epoch start, after restoring the modes, so a layer unfrozen later trains again.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4)).train()
        >>> _ = model[1].requires_grad_(False)
        >>> keep_frozen_norms_in_eval(model), model[1].training
        (['1'], False)
    """
    names = []
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and module.track_running_stats:
            params = list(module.parameters(recurse=False))
            if params and not any(p.requires_grad for p in params):
                module.eval()
                names.append(name)
    return names


def _new_totals(device: torch.device) -> dict[str, Any]:
    zero = torch.zeros((), device=device)
    return {"loss_sum": zero.clone(), "samples": 0, "steps": 0, "norm_sum": zero.clone(), "terms": {},
            "elapsed": 0.0, "skipped_at_start": 0}


def _windows(loader: Iterable[Any], size: int) -> Iterable[Sequence[Any]]:
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

