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
    >>> [round(h["epoch"]) for h in history]
    [0, 1]
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchwork.distributed.env import World, world_from_env
from torchwork.engine.batches import call_model, concat_outputs, inputs_of, length_or_none, split_error
from torchwork.engine.callbacks import EarlyStopping
from torchwork.engine.devices import batch_size_of, check_model_on, move_to_device, resolve_device
from torchwork.engine.precision import keep_in_fp32, resolve_precision
from torchwork.engine.progress import ProgressBar
from torchwork.errors import CheckpointError, ConfigError, LossError

Tensor = torch.Tensor
LossFn = Callable[[Any, Any], Any]
StepFn = Callable[[nn.Module, Any], Any]


class Trainer:
    """Trains ``model`` with ``optimizer`` on ``loss_fn(outputs, targets)``.

    Args:
        model: the module to train; moved to ``device``.
        optimizer: holds (some of) the model's parameters.
        loss_fn: ``loss_fn(outputs, targets)`` returning a scalar or a dict of named scalars.
        scheduler: an LR scheduler, stepped once per optimizer step (ReduceLROnPlateau: once per epoch,
            on ``plateau_monitor``).
        device: ``"auto"`` (cuda, then mps, then cpu) or any device name.
        precision: ``"32"``, ``"bf16"`` (autocast, no scaler) or ``"fp16"`` (autocast + GradScaler).
        accumulate: micro-batches per optimizer step; the update equals one batch made of all of them.
        clip_grad_norm: clip the total gradient norm to this value (on unscaled gradients).
        clip_grad_value: clip each gradient element to ``[-v, v]``.
        loss_weights: weights of the named losses when ``loss_fn`` returns a dict (missing names weigh 1).
        step_fn: ``step_fn(model, batch) -> loss`` replaces the ``(inputs, targets)`` convention.
        metrics: ``{"name": fn(outputs, targets)}`` computed during evaluation (batch means).
        epoch_metrics: ``{"name": fn(all_outputs, all_targets)}`` computed once over the whole evaluation
            set, for metrics that are not batch means (macro-F1, AUC).
        callbacks: objects with ``on_fit_start``, ``on_step_end``, ``on_epoch_end``, ``on_fit_end``.
        early_stopping: an :class:`EarlyStopping`, or a metric name to stop on (patience 3).
        keep_fp32: submodule names or classes that run in fp32 under autocast.
        log_every_n_steps: how often step metrics go to the loggers and ``on_step_end``.
        progress: show progress (default True): a bar when stderr is a terminal, else a plain line every
            ``progress_every_s`` seconds and at each epoch's end; False: nothing.
        progress_every_s: seconds between plain progress lines (default: env TORCHWORK_PROGRESS_EVERY, else 30).
        loggers: objects with ``log(metrics: dict, step: int)``.
        run_dir: keep runs here: each ``fit`` makes ``run_dir/<UTC time>-<id>/`` with ``manifest.json``,
            ``metrics.jsonl``, TensorBoard events and ``checkpoints/`` (nothing is written without it).
        checkpoint_every_n_steps: also checkpoint mid-epoch every n optimizer steps (always at epoch end).
        keep_checkpoints: how many step checkpoints to keep (``best.pt`` is kept besides).
        checkpoint_monitor: ``(metric, "min"|"max")`` that picks ``best.pt`` (default: the early-stopping
            metric, else ``val_loss``/``train_loss``).
        config: the resolved configuration to record in the manifest.
        tensorboard: write TensorBoard event files into the run folder.
        distributed: run under torchrun as one DDP rank (default: when torchrun's WORLD_SIZE > 1).
        distributed_timeout_s: how long a collective waits for a silent peer before failing.
        distributed_debug: check that every rank runs the same collectives, and name the call site of
            the first that differs (default: env TORCHWORK_DISTRIBUTED_DEBUG=1). Slower; for debugging.
        guard: run the doctor's cheap checks during training (non-finite loss, exploding gradients,
            BatchNorm on one sample, modes, fp16 scale collapse); findings warn once and are kept in
            ``trainer.guard.findings``.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn | None = None,
                 scheduler: Any = None, *, device: str | torch.device = "auto", precision: str = "32",
                 accumulate: int = 1, clip_grad_norm: float | None = None,
                 clip_grad_value: float | None = None, loss_weights: Mapping[str, float] | None = None,
                 step_fn: StepFn | None = None, metrics: Mapping[str, Callable[[Any, Any], Any]] | None = None,
                 epoch_metrics: Mapping[str, Callable[[Any, Any], Any]] | None = None,
                 callbacks: Sequence[Any] = (), early_stopping: EarlyStopping | str | None = None,
                 keep_fp32: Iterable[str | type] = (), log_every_n_steps: int = 50,
                 progress: bool | None = None, progress_every_s: float | None = None,
                 plateau_monitor: str = "val_loss",
                 loggers: Sequence[Any] = (), run_dir: str | os.PathLike[str] | None = None,
                 checkpoint_every_n_steps: int | None = None, keep_checkpoints: int = 3,
                 checkpoint_monitor: tuple[str, str] | None = None, config: Mapping[str, Any] | None = None,
                 tensorboard: bool = True, distributed: bool | None = None,
                 distributed_timeout_s: float = 300.0, distributed_debug: bool | None = None,
                 guard: bool = True) -> None:
        if not isinstance(model, nn.Module):
            raise ConfigError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
        if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
            raise ConfigError(f"accumulate={accumulate!r}: it is the number of micro-batches per optimizer "
                              "step and must be an integer >= 1 (1 means no accumulation).")
        if loss_fn is None and step_fn is None:
            raise ConfigError("Trainer needs loss_fn(outputs, targets) or step_fn(model, batch) -> loss.")
        for name, value in (("clip_grad_norm", clip_grad_norm), ("clip_grad_value", clip_grad_value)):
            if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
                raise ConfigError(f"{name}={value!r} must be a positive finite number (or None to not clip).")
        if log_every_n_steps < 1:
            raise ConfigError(f"log_every_n_steps={log_every_n_steps} must be >= 1.")
        if checkpoint_every_n_steps is not None and (not isinstance(checkpoint_every_n_steps, int)
                                                     or checkpoint_every_n_steps < 1):
            raise ConfigError(f"checkpoint_every_n_steps={checkpoint_every_n_steps!r} must be an integer >= 1.")
        if keep_checkpoints < 1:
            raise ConfigError(f"keep_checkpoints={keep_checkpoints} must be >= 1.")

        self.world = world_from_env() if distributed is not False else World()
        if self.world.is_distributed:
            from torchwork.distributed import setup as dist_setup

            if distributed_debug is None:
                distributed_debug = os.environ.get("TORCHWORK_DISTRIBUTED_DEBUG") == "1"
            dist_setup.init_process_group(self.world, distributed_timeout_s, distributed_debug)
            if device == "auto" and torch.cuda.is_available():
                device = f"cuda:{self.world.local_rank}"  # one GPU per process
        self.device = resolve_device(device)
        self.model = model.to(self.device)
        check_model_on(self.model, self.device)
        # What the training step calls: the model itself, or its DDP wrapper (which all-reduces gradients).
        self._train_model: nn.Module = self.model
        self._ddp = None
        if self.world.is_distributed:
            self._ddp = self._train_model = dist_setup.wrap_ddp(self.model, self.device)
        if isinstance(loss_fn, nn.Module):
            loss_fn.to(self.device)  # e.g. CrossEntropyLoss(weight=...) whose weights live on the CPU
        self.optimizer = optimizer
        self._check_optimizer(model, optimizer)
        self.loss_fn, self.step_fn, self.scheduler = loss_fn, step_fn, scheduler
        self.plateau_monitor = plateau_monitor
        self._plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        self.precision = resolve_precision(precision, self.device)
        self.scaler = self.precision.scaler
        self._fp32_hooks = keep_in_fp32(model, keep_fp32, self.device.type) if keep_fp32 else []
        self.accumulate = accumulate
        self.clip_grad_norm, self.clip_grad_value = clip_grad_norm, clip_grad_value
        self.loss_weights = dict(loss_weights) if loss_weights else None
        self.metrics = dict(metrics or {})
        self.epoch_metrics = dict(epoch_metrics or {})
        if isinstance(early_stopping, str):
            mode = "min" if "loss" in early_stopping else "max"
            early_stopping = EarlyStopping(monitor=early_stopping, mode=mode)
        self.early_stopping = early_stopping
        self.callbacks = [*callbacks, *([early_stopping] if early_stopping is not None else [])]
        self.loggers = list(loggers)
        self.log_every_n_steps = log_every_n_steps
        self.progress = progress
        if progress_every_s is not None and not progress_every_s > 0:
            raise ConfigError(f"progress_every_s={progress_every_s} must be > 0 seconds.")
        self.progress_every_s = progress_every_s
        self._epochs_total: int | None = None
        self._non_blocking = self.device.type == "cuda"
        self.run_dir = run_dir
        self.checkpoint_every_n_steps = checkpoint_every_n_steps
        self.keep_checkpoints = keep_checkpoints
        if checkpoint_monitor is None and early_stopping is not None:
            checkpoint_monitor = (early_stopping.monitor, early_stopping.mode)
        self.checkpoint_monitor = checkpoint_monitor
        self.config = dict(config or {})
        self.tensorboard = tensorboard
        self.run_path = None  # set by fit() when run_dir is given
        self.guard = None
        if guard:
            from torchwork.doctor.guard import attach_guard

            self.guard = attach_guard(self)
            self.callbacks.append(self.guard)  # its on_epoch_end checks the epoch's last partial window
        self._session = None

        # Counters (saved in checkpoints): optimizer steps attempted, steps skipped by the scaler.
        self.global_step = 0
        self.skipped_steps = 0
        self.epoch = 0
        self.batch_in_epoch = 0  # micro-batches of the current epoch already trained on
        self.should_stop = False
        self.history: list[dict[str, Any]] = []
        self._checked_first_batch = False
        self._train_modes: list[bool] | None = None
        self._last_grad_norm: Tensor | None = None
        self._loss_terms: dict[str, Tensor] | None = None
        self._totals: dict[str, Any] = {}
        self._epoch_start_rng: dict[str, Any] | None = None
        self._loader_generator: torch.Generator | None = None  # the train loader's own shuffling generator
        self._resumed_loader_rng: Tensor | None = None  # its state from an end-of-epoch checkpoint
        self._checkpointing = False

    # ------------------------------------------------------------------ the step
    def _run_window(self, window: Sequence[Any]) -> tuple[Tensor, int]:
        """One optimizer step over the micro-batches of ``window``; returns (detached loss, samples).

        The order is the whole point: zero_grad -> (autocast forward -> loss -> backward) per micro-batch
        -> unscale -> clip -> optimizer step (skipped on inf/NaN under a scaler) -> scaler update ->
        scheduler step.
        """
        optimizer, scaler = self.optimizer, self.scaler
        # set_to_none frees the gradients instead of zero-filling them (less memory, no memset).
        optimizer.zero_grad(set_to_none=True)

        # Exact accumulation (Composer-style): weight each micro-batch by its share of the samples in the
        # window, so a short last window averages over its own samples instead of getting 1/k each. Under
        # DDP the share is of the samples on all ranks (DDP then averages over ranks, hence * world size).
        accumulating = len(window) > 1
        if accumulating:
            counts = [self._samples_in(batch) for batch in window]
            window_samples = sum(counts)
            scale = 1.0 / window_samples
            if self._ddp is not None:
                scale = self.world.world_size / self._all_reduce_sum([window_samples])[0]
        window_loss = None
        last = len(window) - 1
        for index, batch in enumerate(window):
            weight = counts[index] * scale if accumulating else None
            if self._ddp is not None and index < last:
                with self._ddp.no_sync():  # all-reduce gradients once, after the window's last micro-batch
                    loss, samples = self._micro_step(batch, weight)
            else:
                loss, samples = self._micro_step(batch, weight)
            if accumulating:
                window_loss = loss * counts[index] if window_loss is None else window_loss + loss * counts[index]
            else:
                window_loss, window_samples = loss, samples
        if accumulating:
            window_loss = window_loss / window_samples  # the local sample mean, for logging

        if scaler is not None:
            scaler.unscale_(optimizer)  # clip and log the true gradients, not the scaled ones
        # Read from the optimizer at each step: groups added during training (gradual unfreezing) count too.
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if self.clip_grad_norm is not None:
            # Returns the norm measured before clipping: that is the one worth logging.
            self._last_grad_norm = torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
        if self.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(params, self.clip_grad_value)

        stepped = True
        if scaler is None:
            optimizer.step()
        else:
            scale_before = scaler.get_scale()
            scaler.step(optimizer)  # skipped when unscale_ found inf/NaN gradients
            scaler.update()
            stepped = scaler.get_scale() >= scale_before  # the scale only shrinks after a skipped step
            if not stepped:
                self.skipped_steps += 1
        if self.scheduler is not None and stepped and not self._plateau:
            self.scheduler.step()  # counts optimizer steps, never micro-batches
        self.global_step += 1
        if self.guard is not None:
            self.guard.after_step(window_loss, batch_size=min(counts) if accumulating else window_samples,
                                  grad_norm=self._last_grad_norm, skipped=not stepped)
        return window_loss, window_samples

    def _micro_step(self, batch: Any, weight: float | None) -> tuple[Tensor, int]:
        """Forward (under autocast) -> loss -> backward for one micro-batch; returns (detached loss, samples)."""
        if self.precision.dtype is None:
            loss, samples = self._forward_loss(batch)
        else:
            with torch.autocast(self.precision.device_type, dtype=self.precision.dtype):
                loss, samples = self._forward_loss(batch)
        weighted = loss if weight is None else loss * weight
        # fp16: multiply the loss by the scale so that small gradients do not underflow to zero.
        if self.scaler is None:
            weighted.backward()
        else:
            self.scaler.scale(weighted).backward()
        return loss.detach(), samples

    def _forward_loss(self, batch: Any) -> tuple[Tensor, int]:
        """Forward pass and loss for one micro-batch: returns (loss, number of samples)."""
        if not self._checked_first_batch:
            self._check_batch(batch)
        if self.step_fn is not None:
            batch = move_to_device(batch, self.device)
            loss = self.step_fn(self._train_model, batch)
            samples = batch_size_of(batch) or 1
        else:
            inputs, targets = batch
            if isinstance(inputs, Tensor):
                inputs = inputs.to(self.device, non_blocking=self._non_blocking)
            else:
                inputs = move_to_device(inputs, self.device)
            if isinstance(targets, Tensor):
                targets = targets.to(self.device, non_blocking=self._non_blocking)
                samples = targets.shape[0] if targets.ndim else 1
            else:
                targets = move_to_device(targets, self.device)
                samples = batch_size_of(targets) or batch_size_of(inputs) or 1
            loss = self.loss_fn(call_model(self._train_model, inputs), targets)
        if type(loss) is not Tensor or loss.ndim != 0:
            loss = self._combine_loss(loss)
        if not loss.requires_grad:
            raise LossError(
                "the loss does not require grad, so backward() has nothing to do. It was computed under "
                "torch.no_grad()/inference_mode, from .detach()/.item()/.data values, or the model has no "
                "trainable parameters. Setting loss.requires_grad = True only hides the break: find it "
                "(`torchwork doctor` names the line).")
        return loss, samples

    def _combine_loss(self, loss: Any) -> Tensor:
        """A dict of named losses -> their weighted sum; remember each term for logging."""
        if isinstance(loss, Mapping):
            if not loss:
                raise LossError("loss_fn returned an empty dict: return at least one named loss.")
            weights = self.loss_weights or {}
            unknown = set(weights) - set(loss)
            if unknown:
                raise LossError(f"loss_weights names {sorted(unknown)}, but loss_fn returned only "
                                f"{sorted(loss)}. Fix the names in loss_weights.")
            terms = {}
            for name, value in loss.items():
                terms[name] = self._as_scalar_loss(value, f"loss term {name!r}")
            self._loss_terms = {name: value.detach() for name, value in terms.items()}
            return sum(weights.get(name, 1.0) * value for name, value in terms.items())
        return self._as_scalar_loss(loss, "the loss")

    @staticmethod
    def _as_scalar_loss(value: Any, what: str) -> Tensor:
        if not isinstance(value, Tensor):
            raise LossError(f"{what} is a {type(value).__name__}, not a tensor: return the tensor itself "
                            "(not loss.item()) so that backward() can reach the model.")
        if value.ndim != 0:
            raise LossError(
                f"{what} has shape {tuple(value.shape)}; backward() needs a scalar. Reduce it (e.g. "
                "reduction='mean' in the loss, or .mean()) so that gradients do not depend on batch size.")
        return value

    def _all_reduce_sum(self, values: list[float]) -> list[float]:
        from torchwork.distributed.setup import all_reduce_sum

        return all_reduce_sum(values, self.device)

    def _samples_in(self, batch: Any) -> int:
        if self.step_fn is None and isinstance(batch, (tuple, list)) and len(batch) == 2:
            return batch_size_of(batch[1]) or batch_size_of(batch[0]) or 1
        return batch_size_of(batch) or 1

    def _check_batch(self, batch: Any) -> None:
        if self.step_fn is None and (not isinstance(batch, (tuple, list)) or len(batch) != 2):
            raise split_error(batch)
        self._checked_first_batch = True

    # ------------------------------------------------------------------ public step API
    def step(self, *batches: Any) -> Tensor:
        """Run one optimizer step over one batch, or over several micro-batches (accumulated exactly).

        For users who keep their own loop; returns the detached loss (the window's sample mean).
        """
        if not batches:
            raise ConfigError("trainer.step() needs at least one batch.")
        loss, _ = self._run_window(batches)
        return loss

    # ------------------------------------------------------------------ the loop
    def fit(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None = None,
            epochs: int = 1, resume: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
        """Train for ``epochs`` epochs; returns the per-epoch metrics (also kept in ``self.history``).

        ``resume``: ``"latest"`` continues the newest run under ``run_dir`` from its newest valid
        checkpoint (a no-op when there is none), a run folder or checkpoint path resumes from that.
        The environment variable ``TORCHWORK_RESUME`` (set by ``torchwork resume``) overrides it.
        """
        if epochs < 0:
            raise ConfigError(f"epochs={epochs} must be >= 0.")
        resume = os.environ.get("TORCHWORK_RESUME") or resume
        self.should_stop = False
        self._epochs_total = epochs
        if self.world.is_distributed:
            from torchwork.distributed.setup import check_same_length, shard_loader
            from torchwork.runs.seeding import current_seed

            seed = current_seed()["seed"] or 0
            train_loader = shard_loader(train_loader, self.world, train=True, seed=seed)
            check_same_length(length_or_none(train_loader), self.device)
        self._capture_train_modes()
        state = self._open_run(train_loader, val_loader, epochs, resume)
        if state is not None:
            self.load_state_dict(state)
        loggers_before = self.loggers
        if not self.world.is_rank_zero:
            self.loggers = []  # rank 0 speaks for the job
        if self._session is not None:
            self.loggers = [*self.loggers, *self._session.loggers]
        try:
            for callback in self.callbacks:
                if hasattr(callback, "on_fit_start"):
                    callback.on_fit_start(self)
            while self.epoch < epochs and not self.should_stop:
                set_epoch = getattr(getattr(train_loader, "sampler", None), "set_epoch", None)
                if callable(set_epoch):
                    set_epoch(self.epoch)  # DistributedSampler reshuffles only when told the epoch
                self._restore_train_modes()
                logs = self._train_epoch(self._epoch_batches(train_loader))
                if val_loader is not None:
                    logs.update(self.evaluate(val_loader, prefix="val_"))
                self._end_epoch(logs)
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
            if self._session is not None:
                self._session.close()
                self._session = None
        return self.history

    def _open_run(self, train_loader: Any, val_loader: Any, epochs: int, resume: Any) -> dict[str, Any] | None:
        """Open the run folder (rank 0 only) and load the checkpoint to resume from, if any."""
        self._checkpointing = self.run_dir is not None
        state = None
        if self.run_dir is not None:
            if self.world.is_rank_zero:
                from torchwork.runs.session import RunSession

                self._session, state = RunSession.open(self, train_loader, val_loader, epochs, resume)
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

    def _epoch_batches(self, loader: Iterable[Any]) -> Iterable[Any]:
        """The epoch's batch iterator, positioned after the batches a resumed checkpoint already trained."""
        from torchwork.runs.rng import capture_rng, restore_rng

        generator = getattr(loader, "generator", None)
        self._loader_generator = generator if isinstance(generator, torch.Generator) else None
        if self.batch_in_epoch == 0:
            if self._resumed_loader_rng is not None and self._loader_generator is not None:
                # resumed at an epoch boundary: the loader's own generator continues where it was, so the
                # next epoch's order is not the first epoch's again
                self._loader_generator.set_state(self._resumed_loader_rng)
            self._resumed_loader_rng = None
            self._totals = _new_totals(self.device)
            self._totals["skipped_at_start"] = self.skipped_steps
            if self.run_dir is not None:
                # Iterating a shuffling DataLoader draws its order (and its workers' seeds) from these.
                self._epoch_start_rng = {"torch": torch.get_rng_state(),
                                         "loader": generator.get_state() if generator is not None else None}
            return _Sized(iter(loader), length_or_none(loader))
        # Mid-epoch resume: replay the epoch's start, then skip what was trained. The skipped batches are
        # loaded, not just counted, so that workers' random augmentations stay in step too.
        self._resumed_loader_rng = None  # the epoch-start state below puts the loader's generator in step
        if self._epoch_start_rng is None:
            raise CheckpointError("the checkpoint is mid-epoch but holds no epoch-start RNG state.")
        resumed_rng = capture_rng()
        torch.set_rng_state(self._epoch_start_rng["torch"])
        if generator is not None and self._epoch_start_rng["loader"] is not None:
            generator.set_state(self._epoch_start_rng["loader"])
        iterator = iter(loader)
        for skipped in range(self.batch_in_epoch):
            if next(iterator, _END) is _END:
                raise CheckpointError(f"the checkpoint was taken after batch {self.batch_in_epoch} of epoch "
                                      f"{self.epoch}, but the loader now has only {skipped}. Resume with the "
                                      "same dataset and batch size.")
        restore_rng(resumed_rng)
        return iterator

    def _train_epoch(self, batches: Iterable[Any]) -> dict[str, Any]:
        started = time.perf_counter()
        totals = self._totals
        self._loss_terms = None
        on_step = [c.on_step_end for c in self.callbacks if hasattr(c, "on_step_end")]
        checkpoint_every = self.checkpoint_every_n_steps if self._checkpointing else None
        batches_total = length_or_none(batches)
        windows_total = -(-batches_total // self.accumulate) if batches_total is not None else None
        bar = ProgressBar(windows_total, enabled=self.progress if self.world.is_rank_zero else False,
                          epoch=self.epoch, epochs=self._epochs_total, every_s=self.progress_every_s)
        show_bar = bar.enabled
        for window in _windows(batches, self.accumulate):
            loss, samples = self._run_window(window)
            self.batch_in_epoch += len(window)
            totals["loss_sum"] += loss * samples
            totals["samples"] += samples
            totals["steps"] += 1
            if self._loss_terms is not None:
                terms = totals["terms"]
                for name, value in self._loss_terms.items():
                    terms[name] = terms.get(name, 0) + value * samples
            if self._last_grad_norm is not None:
                totals["norm_sum"] += self._last_grad_norm
            if show_bar:
                bar.update(samples, loss)  # read (a device sync) only when a line is drawn
            if self.loggers and self.global_step % self.log_every_n_steps == 0:
                logs = self._step_logs(loss)
                for logger in self.loggers:
                    logger.log(logs, self.global_step)
            if on_step:
                # every step; the loss stays a tensor so that a callback costs no device sync unless it asks
                step_logs = {"step": self.global_step, "epoch": self.epoch, "loss": loss}
                for callback in on_step:
                    callback(self, step_logs)
            if checkpoint_every and self.global_step % checkpoint_every == 0:
                totals["elapsed"] += time.perf_counter() - started
                started = time.perf_counter()
                self._save_checkpoint()
        bar.close()
        totals["elapsed"] += time.perf_counter() - started
        steps = totals["steps"]
        if steps == 0:
            raise ConfigError("the training loader yielded no batches: check the dataset length, "
                              "batch_size and drop_last.")
        term_names = sorted(totals["terms"])
        sums = [float(totals["loss_sum"]), totals["samples"], *(float(totals["terms"][n]) for n in term_names)]
        if self.world.is_distributed:
            sums = self._all_reduce_sum(sums)  # every rank reports the job's numbers
        samples_seen = int(sums[1])
        logs: dict[str, Any] = {"epoch": self.epoch, "train_loss": sums[0] / samples_seen}
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

    def _step_logs(self, loss: Tensor) -> dict[str, Any]:
        logs: dict[str, Any] = {"step": self.global_step, "epoch": self.epoch, "loss": float(loss),
                                "lr": self.optimizer.param_groups[0]["lr"]}
        if self._loss_terms is not None:
            logs.update({f"loss_{k}": float(v) for k, v in self._loss_terms.items()})
        if self._last_grad_norm is not None:
            logs["grad_norm"] = float(self._last_grad_norm)
        if self.scaler is not None:
            logs.update(scale=self.scaler.get_scale(), skipped_steps=self.skipped_steps)
        return logs

    def _end_epoch(self, logs: dict[str, Any]) -> None:
        if self._plateau:
            if self.plateau_monitor not in logs:
                raise ConfigError(f"ReduceLROnPlateau needs {self.plateau_monitor!r}, but the epoch "
                                  f"logged {sorted(logs)}. Pass a val_loader or plateau_monitor=.")
            self.scheduler.step(logs[self.plateau_monitor])
        self.history.append(logs)
        for logger in self.loggers:
            logger.log(logs, self.global_step)
        for callback in self.callbacks:
            if hasattr(callback, "on_epoch_end"):
                callback.on_epoch_end(self, logs)
        self.epoch += 1
        self.batch_in_epoch = 0
        if self._checkpointing:
            self._save_checkpoint(logs)  # after the callbacks, so early stopping's state is in it

    def _save_checkpoint(self, metrics: dict[str, Any] | None = None) -> None:
        state = self.state_dict()  # a collective under DDP: every rank contributes its RNG state
        if self._session is not None:
            self._session.save(state, metrics)

    # ------------------------------------------------------------------ state (checkpoints)
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly: weights, optimizer, scheduler, scaler, every
        RNG stream, the data position, counters, history and callback state."""
        from torchwork.runs.checkpoint import FORMAT_VERSION, clean_state_dict, unwrap_model
        from torchwork.runs.rng import capture_rng

        mid_epoch = self.batch_in_epoch > 0
        own = {"rng": capture_rng(), "epoch_start_rng": self._epoch_start_rng if mid_epoch else None,
               "loader_rng": (self._loader_generator.get_state()
                              if self._loader_generator is not None and not mid_epoch else None),
               "epoch_totals": dict(self._totals) if mid_epoch else None}
        per_rank = None
        if self.world.is_distributed:
            from torchwork.distributed.setup import gather_object

            per_rank = gather_object(move_to_device(own, torch.device("cpu")))  # each rank resumes its own
        return {
            "format_version": FORMAT_VERSION,
            "world_size": self.world.world_size,
            "per_rank": per_rank,
            "model": clean_state_dict(unwrap_model(self.model).state_dict()),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "counters": {"global_step": self.global_step, "skipped_steps": self.skipped_steps,
                         "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch},
            **own,
            "history": list(self.history),
            "callbacks": [c.state_dict() if hasattr(c, "state_dict") else None for c in self.callbacks],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (every RNG stream included)."""
        from torchwork.runs.checkpoint import clean_state_dict, unwrap_model
        from torchwork.runs.rng import restore_rng

        try:
            unwrap_model(self.model).load_state_dict(clean_state_dict(state["model"]))
        except RuntimeError as error:
            raise CheckpointError(f"the checkpoint's weights do not fit this model: {error}") from None
        # Callbacks first: one that added parameter groups during training (gradual unfreezing) adds them
        # again, so that the optimizer and scheduler states fit.
        for callback, saved in zip(self.callbacks, state.get("callbacks") or []):
            if saved is not None and hasattr(callback, "load_state_dict"):
                callback.load_state_dict(saved)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        counters = state["counters"]
        self.global_step, self.skipped_steps = counters["global_step"], counters["skipped_steps"]
        self.epoch, self.batch_in_epoch = counters["epoch"], counters["batch_in_epoch"]
        own = self._own_rank_state(state)
        self._epoch_start_rng = own.get("epoch_start_rng")
        self._resumed_loader_rng = own.get("loader_rng")
        if own.get("epoch_totals"):
            self._totals = move_to_device(dict(own["epoch_totals"]), self.device)
        self.history = list(state.get("history", []))
        restore_rng(own["rng"])

    def _own_rank_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """This rank's RNG and data-position state from a checkpoint, checking the world size."""
        saved_world = state.get("world_size", 1)
        if saved_world != self.world.world_size:
            if state["counters"]["batch_in_epoch"] > 0:
                raise CheckpointError(
                    f"this checkpoint was written mid-epoch by {saved_world} process(es) and this run has "
                    f"{self.world.world_size}: the data each rank had already seen cannot be mapped onto a "
                    "different number of ranks. Resume with the same world size, or from an end-of-epoch "
                    "checkpoint (those work at any world size: weights, optimizer and schedule carry over; "
                    "the next epochs' per-rank shuffles follow the new world size).")
            if self.world.is_rank_zero:
                print(f"torchwork: resuming a {saved_world}-process checkpoint with {self.world.world_size} "
                      "process(es): weights, optimizer and schedule carry over exactly; data order and random "
                      "streams from here on follow the new world size.", file=sys.stderr)
        per_rank = state.get("per_rank")
        if per_rank:
            return per_rank[self.world.rank % len(per_rank)]
        return state

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
        all of it, in eval mode."""
        totals: dict[str, float] = {}
        samples_seen = 0
        collected: list[tuple[Any, Any]] = []  # (outputs, targets) on the CPU, for epoch_metrics
        if self.world.is_distributed:
            from torchwork.distributed.setup import shard_loader

            loader = shard_loader(loader, self.world, train=False)  # each rank evaluates its share
        with self.evaluating():
            for batch in loader:
                batch = move_to_device(batch, self.device)
                if self.step_fn is not None:
                    values = {"loss": self.step_fn(self.model, batch)}
                    samples = batch_size_of(batch) or 1
                else:
                    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                        raise split_error(batch)
                    inputs, targets = batch
                    outputs = call_model(self.model, inputs)
                    values = {"loss": self.loss_fn(outputs, targets)}
                    samples = batch_size_of(targets) or batch_size_of(inputs) or 1
                    for name, metric in self.metrics.items():
                        values[name] = metric(outputs, targets)
                    if self.epoch_metrics:
                        collected.append(move_to_device((outputs, targets), torch.device("cpu")))
                loss = values["loss"]
                if isinstance(loss, Mapping):
                    weights = self.loss_weights or {}
                    for name, value in loss.items():
                        values[f"loss_{name}"] = value
                    values["loss"] = sum(weights.get(n, 1.0) * v for n, v in loss.items())
                for name, value in values.items():
                    totals[name] = totals.get(name, 0.0) + float(value) * samples
                samples_seen += samples
        if self.world.is_distributed:
            from torchwork.distributed.setup import gather_object

            # a rank whose shard was empty has no names yet: agree on the union first
            names = sorted({name for names in gather_object(sorted(totals)) for name in names})
            summed = self._all_reduce_sum([float(samples_seen), *(totals.get(n, 0.0) for n in names)])
            samples_seen, totals = int(summed[0]), dict(zip(names, summed[1:]))
        if samples_seen == 0:
            raise ConfigError("the evaluation loader yielded no batches.")
        results = {f"{prefix}{name}": total / samples_seen for name, total in totals.items()}
        if self.epoch_metrics:
            if self.world.is_distributed:
                from torchwork.distributed.setup import gather_object

                collected = [pair for part in gather_object(collected) for pair in part]
            outputs = concat_outputs([o for o, _ in collected])
            targets = concat_outputs([t for _, t in collected])
            for name, metric in self.epoch_metrics.items():
                results[f"{prefix}{name}"] = float(metric(outputs, targets))
        return results

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
        """The exact order of one training step for the current settings (also printed)."""
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
        if self.scheduler is not None and not self._plateau:
            after.append("scheduler.step() (once per optimizer step)")
        lines.extend(f"  {number}. {text}" for number, text in enumerate(after, start=3))
        if self._plateau:
            lines.append(f"  once per epoch: scheduler.step({self.plateau_monitor})")
        lines.append(f"  every {self.log_every_n_steps} steps: log loss, lr"
                     + (", grad_norm" if self.clip_grad_norm else "") + (", scale" if self.scaler else ""))
        text = "\n".join(lines)
        print(text)
        return text


_END = object()


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


class _Sized:
    """An iterator that still knows the loader's length (for the progress bar)."""

    def __init__(self, iterator: Any, length: int | None) -> None:
        self.iterator, self.length = iterator, length

    def __iter__(self) -> Any:
        return self.iterator

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("length unknown")
        return self.length


def _new_totals(device: torch.device) -> dict[str, Any]:
    zero = torch.zeros((), device=device)
    return {"loss_sum": zero.clone(), "samples": 0, "steps": 0, "norm_sum": zero.clone(), "terms": {},
            "elapsed": 0.0, "skipped_at_start": 0}


def _windows(loader: Iterable[Any], size: int) -> Iterable[Sequence[Any]]:
    """Group batches into accumulation windows of ``size``; the last window of an epoch may be shorter."""
    if size == 1:
        for batch in loader:
            yield (batch,)
        return
    window: list[Any] = []
    for batch in loader:
        window.append(batch)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window

