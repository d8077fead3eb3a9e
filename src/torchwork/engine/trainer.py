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

import dataclasses
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from torchwork.arguments import check_flag
from torchwork.distributed.env import World, world_from_env
from torchwork.engine.batches import length_or_none
from torchwork.engine.callbacks import EarlyStopping, check_callbacks
from torchwork.engine.checkpoint import TrainerCheckpoint, read_checkpoint, write_checkpoint
from torchwork.engine.compiling import Compiler, forward_backward
from torchwork.engine.devices import check_model_on, move_to_device, resolve_device
from torchwork.engine.epoch import EpochTotals, step_logs_of
from torchwork.engine.hyperparameters import check_param_groups
from torchwork.engine.loop import LoopPlan, TrainingLoop
from torchwork.engine.modes import TrainModes, evaluating
from torchwork.engine.options import (
    DistributedOptions,
    EvaluationOptions,
    GroupSetting,
    LoggingOptions,
    StateView,
    StepOptions,
    group_keywords,
)
from torchwork.engine.precision import keep_in_fp32, resolve_precision
from torchwork.engine.progress import Say
from torchwork.engine.step import ForwardLoss, LocalSync, StepResult, StepSetup, optimizer_step
from torchwork.engine.threads import StepThreads
from torchwork.errors import CheckpointError, ConfigError
from torchwork.runs.options import RunOptions
from torchwork.runs.resume import TrainingState
from torchwork.threads import ThreadChoice

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
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
        guard = check_flag(guard, "guard")  # guard="no" attached the guard

        dist_options: DistributedOptions = groups["distributed"]
        self.world = world_from_env() if dist_options.enabled is not False else World()
        if self.world.is_distributed:
            from torchwork.distributed import setup as dist_setup

            dist_setup.init_process_group(self.world, dist_options.timeout_s, dist_options.resolved_debug())
            if device == "auto" and torch.cuda.is_available():
                device = f"cuda:{self.world.local_rank}"  # one GPU per process
        self.device = resolve_device(device)
        # a line on stderr beside the progress (a decision, an evaluation, a stop): from rank 0, progress shown
        self.say = Say(lambda: self.progress is not False and self.world.is_rank_zero)
        # torch's CPU thread count: set now for a count, tuned on the first steps for "auto" (engine/threads.py)
        self.cpu_threads = StepThreads(step.threads, self.device, self.world, self.say)
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
        self.callbacks = [*check_callbacks(callbacks), *([early_stopping] if early_stopping is not None else [])]
        self.loggers = list(logging.loggers)  # in use now: fit adds the run folder's while it runs
        self._epochs_total: int | None = None
        self.loop: LoopPlan | None = None  # how long the running (or last) fit trains, when it evaluates
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
        self.modes = TrainModes(self.model)  # the submodules' train/eval flags, put back at each epoch start

        # Where training is (counters, data position, RNG streams): saved in every checkpoint.
        self.state = TrainingState()
        self.should_stop = False
        self.stop_reason: str | None = None  # why a resumed run had stopped (its checkpoint's ``stopped``)
        self._totals: EpochTotals | None = None

    # ------------------------------------------------------------------ settings, each read from its group
    accumulate = GroupSetting("step")
    clip_grad_norm = GroupSetting("step")
    clip_grad_value = GroupSetting("step")
    loss_weights = GroupSetting("step")
    scheduler_interval = GroupSetting("step")
    metrics = GroupSetting("evaluation")
    epoch_metrics = GroupSetting("evaluation")
    early_stopping = GroupSetting("evaluation")
    plateau_monitor = GroupSetting("evaluation")
    log_every_n_steps = GroupSetting("logging")
    progress = GroupSetting("logging")
    progress_every_s = GroupSetting("logging")
    run_dir = GroupSetting("run")
    checkpoint_every_n_steps = GroupSetting("run")
    keep_checkpoints = GroupSetting("run")
    checkpoint_monitor = GroupSetting("run")
    config = GroupSetting("run")
    tensorboard = GroupSetting("run")

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

    # ------------------------------------------------------------------ where training is: views of self.state
    @property
    def epochs_planned(self) -> int | None:
        """The ``epochs`` of the running (or last) ``fit`` (None before the first)."""
        return self._epochs_total

    global_step = StateView[int]("Optimizer steps attempted (``self.state.global_step``).")
    skipped_steps = StateView[int]("Optimizer steps a GradScaler skipped for inf/NaN gradients.")
    epoch = StateView[int]("Epochs completed: the current epoch, 0-based (the history and the progress lines "
                           "count from 1).")
    batch_in_epoch = StateView[int]("Micro-batches of the current epoch already trained on.")
    history = StateView[list[dict[str, Any]]]("The per-epoch metrics so far.")

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
        self.say(f"scheduler: stepped {'once per epoch' if self._schedule.interval == 'epoch' else 'per step'} "
                 f"({self._schedule.reason})")

    @property
    def thread_choice(self) -> ThreadChoice | None:
        """torch's thread count and why (None with ``threads="auto"`` off the CPU, or before the first step)."""
        return self.cpu_threads.choice

    @property
    def epoch_totals(self) -> EpochTotals | None:
        """What the epoch in progress has added up so far (a mid-epoch checkpoint holds it)."""
        return self._totals

    @property
    def loss_terms(self) -> dict[str, Tensor] | None:
        """The named terms of the last micro-batch's loss, when ``loss_fn`` returns a dict of them (detached;
        None for a single loss, and at each epoch's start)."""
        return self._forward.terms

    # ------------------------------------------------------------------ the parts fit's loop drives
    # engine/loop.py and engine/epoch.py run an epoch as begin_epoch, run_window per window, end_epoch.
    def run_window(self, window: Sequence[Any]) -> StepResult:
        """One optimizer step over the micro-batches of ``window`` (:func:`optimizer_step`), counted in
        ``self.state``; no callbacks (:meth:`step` adds the guard's checks, ``fit``'s epoch every callback)."""
        compiler, state, threads = self._compiler, self.state, self.cpu_threads
        if compiler.pending:
            measure = forward_backward(self._forward, self.precision, self.model, window[0])
            self._train_model = compiler.choose(self._train_model, self.model, measure, state.global_step)
            if (compiler.decision or {}).get("compiled"):
                threads.keep_for_compiled()
        threads.before_step(compiler.planned_steps, state.global_step)
        result = optimizer_step(self._step, window)
        threads.after_step(result.samples)
        if not result.stepped:
            state.skipped_steps += 1
        state.global_step += 1
        return result

    def begin_epoch(self, loader: Iterable[Any]) -> tuple[EpochTotals, Iterable[Any]]:
        """An epoch's start: its totals and batch iterator, positioned after the batches a resumed checkpoint
        already trained (whose totals it restored)."""
        self._forward.terms = None
        if self.state.batch_in_epoch == 0 or self._totals is None:
            self._totals = EpochTotals.fresh(self.device, self.state.skipped_steps)
        return self._totals, self.state.epoch_batches(loader, remember_epoch_start=self.run_dir is not None)

    def end_epoch(self, logs: dict[str, Any]) -> None:
        """An epoch's end: a per-epoch scheduler steps, ``logs`` go to the history (unless evaluations fill
        it), the loggers and ``on_epoch_end``, and the epoch is counted (the loop checkpoints after it)."""
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
        self.state.epoch += 1
        self.state.batch_in_epoch = 0

    # ------------------------------------------------------------------ public step API
    def step(self, *batches: Any) -> Tensor:
        """Run one optimizer step over one batch, or over several micro-batches (accumulated exactly).

        For users who keep their own loop; returns the detached loss (the window's sample mean).
        """
        if not batches:
            raise ConfigError("trainer.step() needs at least one batch.")
        result = self.run_window(batches)
        if self.guard is not None:  # a user's own loop gets the guard's per-step checks, not fit's callbacks
            self.guard.on_step_end(self, step_logs_of(self, result))
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
        write_checkpoint(self.state_dict(), path, self.world)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Continue from a checkpoint written by :meth:`save` or by ``fit``: its checksum is verified and it
        is read with ``torch.load(weights_only=True)`` (nothing in it is executed). Under DDP every rank
        calls it: rank 0 reads the file and sends it to the others (no shared filesystem needed)."""
        self.load_state_dict(read_checkpoint(path, self.world, self.device))

    # ------------------------------------------------------------------ the loop
    def fit(self, train_loader: Iterable[Any], val_loader: EvalSets | None = None, epochs: int | None = None,
            resume: str | os.PathLike[str] | None = None, *, max_steps: int | None = None,
            eval_every: int | None = None, eval_at_start: bool = False) -> list[dict[str, Any]]:
        """Train ``epochs`` epochs or ``max_steps`` steps (:mod:`torchwork.engine.loop`); returns the history.

        Given both, training stops at whichever comes first (``max_steps`` caps a run of ``epochs``), and
        ``fit`` says which one will when it starts (with progress on, when the loader's length is known).

        ``resume``: ``"latest"`` continues the newest run under ``run_dir`` from its newest valid
        checkpoint (a no-op when there is none), a run folder or checkpoint path resumes from that.
        A run that differs from this training (model, optimizer, schedule, config, data) is not resumed.
        The environment variable ``TORCHWORK_RESUME`` (set by ``torchwork resume``) names the run to continue:
        the first ``fit`` of the process continues it, a later one its own run nested in it
        (:mod:`torchwork.runs.lineage`).
        """
        from torchwork.runs.lineage import resume_target

        loop = TrainingLoop(self, val_loader, epochs, max_steps, eval_every, eval_at_start)  # checked first
        check_param_groups(self.optimizer)  # a param group may have been edited since the Trainer was built
        resume = resume_target(resume, self.run_dir) if self.world.is_rank_zero else resume
        self.should_stop, self.stop_reason, self.loop = False, None, loop.plan
        self._epochs_total = loop.plan.epochs_planned(train_loader, self.accumulate)
        self._compiler.planned_steps = loop.plan.planned_steps(train_loader, self.accumulate)
        self.cpu_threads.plan_fit(self._compiler.planned_steps, self.state.global_step)
        self._plan_schedule(train_loader, self._epochs_total)
        limit = loop.plan.limit_line(train_loader, self.accumulate)
        if limit is not None:
            self.say(limit)
        if self.world.is_distributed:
            from torchwork.distributed.setup import check_same_length, shard_loader
            from torchwork.seeding import current_seed

            seed = cast(int, current_seed()["seed"] or 0)
            train_loader = shard_loader(train_loader, self.world, train=True, seed=seed)
            check_same_length(length_or_none(train_loader), self.device)
        self.modes.capture()
        loop.watch_carried_state()  # what the step_fn holds now: the first checkpoint compares with it
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
            loop.run(train_loader, self._session)
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

    def _open_run(self, train_loader: Any, loop: TrainingLoop, resume: Any) -> dict[str, Any] | None:
        """Open the run folder (rank 0 only) and load the checkpoint to resume from, if any."""
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

    # ------------------------------------------------------------------ state (checkpoints)
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly: weights, optimizer, scheduler, scaler, every
        RNG stream, the data position, counters, history and callback state (a
        :class:`~torchwork.engine.checkpoint.TrainerCheckpoint`, as the dict written to disk)."""
        return TrainerCheckpoint.capture(self).state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (every RNG stream included); every field is checked
        before anything is touched."""
        totals = TrainerCheckpoint.from_state_dict(state, "given to load_state_dict").restore(self)
        if totals is not None:
            self._totals = EpochTotals.from_state_dict(totals, self.device)

    # ------------------------------------------------------------------ evaluation and prediction
    def evaluating(self) -> AbstractContextManager[None]:
        """``model.eval()`` + ``torch.inference_mode()`` (+ autocast), restoring every submodule's mode."""
        return evaluating(self.model, self.precision)

    def evaluate(self, loader: Iterable[Any], prefix: str = "") -> dict[str, float]:
        """Mean loss (and ``metrics``) over ``loader``, weighted by batch size, plus ``epoch_metrics`` over
        all of it, in eval mode (:func:`torchwork.engine.evaluation.evaluate_loader`)."""
        from torchwork.engine.evaluation import evaluate_loader

        return evaluate_loader(self, self._forward, loader, prefix)

    def predict(self, loader: Iterable[Any]) -> Any:
        """Model outputs for every batch, on the CPU, joined along dimension 0. Batch size 1 works.

        A batch may be an ``(inputs, targets)`` pair, a 1-tuple ``(inputs,)``, or the inputs themselves.
        """
        from torchwork.engine.evaluation import predict_loader

        with self.evaluating():
            return predict_loader(self.model, self.device, loader)

    # ------------------------------------------------------------------ checks and explanations
    @staticmethod
    def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}.")
        check_param_groups(optimizer)  # lr=nan trains NaN weights: refused (again when fit starts)
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
        from torchwork.engine.explain import explain_step

        per_epoch = None
        if self._plateau:
            per_epoch = f"scheduler.step({self.plateau_monitor})"
        elif self._schedule is not None and self._schedule.interval == "epoch":
            per_epoch = f"scheduler.step() ({self._schedule.reason})"
        return explain_step(self, self._per_step_scheduler() is not None, per_epoch)
