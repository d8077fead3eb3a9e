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
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from torchwork.engine.batches import call_model, concat_outputs, inputs_of, split_error
from torchwork.engine.callbacks import EarlyStopping
from torchwork.engine.devices import batch_size_of, check_model_on, move_to_device, resolve_device
from torchwork.engine.precision import keep_in_fp32, resolve_precision
from torchwork.engine.progress import ProgressBar
from torchwork.errors import ConfigError, LossError

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
        callbacks: objects with ``on_fit_start``, ``on_step_end``, ``on_epoch_end``, ``on_fit_end``.
        early_stopping: an :class:`EarlyStopping`, or a metric name to stop on (patience 3).
        keep_fp32: submodule names or classes that run in fp32 under autocast.
        log_every_n_steps: how often step metrics go to the loggers and ``on_step_end``.
        progress: show a progress bar (default: only when stderr is a terminal).
        loggers: objects with ``log(metrics: dict, step: int)``.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn | None = None,
                 scheduler: Any = None, *, device: str | torch.device = "auto", precision: str = "32",
                 accumulate: int = 1, clip_grad_norm: float | None = None,
                 clip_grad_value: float | None = None, loss_weights: Mapping[str, float] | None = None,
                 step_fn: StepFn | None = None, metrics: Mapping[str, Callable[[Any, Any], Any]] | None = None,
                 callbacks: Sequence[Any] = (), early_stopping: EarlyStopping | str | None = None,
                 keep_fp32: Iterable[str | type] = (), log_every_n_steps: int = 50,
                 progress: bool | None = None, plateau_monitor: str = "val_loss",
                 loggers: Sequence[Any] = ()) -> None:
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

        self.device = resolve_device(device)
        self.model = model.to(self.device)
        check_model_on(self.model, self.device)
        if isinstance(loss_fn, nn.Module):
            loss_fn.to(self.device)  # e.g. CrossEntropyLoss(weight=...) whose weights live on the CPU
        self.optimizer = optimizer
        self._params = self._check_optimizer(model, optimizer)
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
        if isinstance(early_stopping, str):
            mode = "min" if "loss" in early_stopping else "max"
            early_stopping = EarlyStopping(monitor=early_stopping, mode=mode)
        self.early_stopping = early_stopping
        self.callbacks = [*callbacks, *([early_stopping] if early_stopping is not None else [])]
        self.loggers = list(loggers)
        self.log_every_n_steps = log_every_n_steps
        self.progress = progress
        self._non_blocking = self.device.type == "cuda"

        # Counters (saved in checkpoints): optimizer steps attempted, steps skipped by the scaler.
        self.global_step = 0
        self.skipped_steps = 0
        self.epoch = 0
        self.should_stop = False
        self.history: list[dict[str, Any]] = []
        self._checked_first_batch = False
        self._train_modes: list[bool] | None = None
        self._last_grad_norm: Tensor | None = None
        self._loss_terms: dict[str, Tensor] | None = None

    # ------------------------------------------------------------------ the step
    def _run_window(self, window: Sequence[Any]) -> tuple[Tensor, int]:
        """One optimizer step over the micro-batches of ``window``; returns (detached loss, samples).

        The order is the whole point: zero_grad -> (autocast forward -> loss -> backward) per micro-batch
        -> unscale -> clip -> optimizer step (skipped on inf/NaN under a scaler) -> scaler update ->
        scheduler step.
        """
        optimizer, scaler, autocast = self.optimizer, self.scaler, self.precision.dtype
        # set_to_none frees the gradients instead of zero-filling them (less memory, no memset).
        optimizer.zero_grad(set_to_none=True)

        # Exact accumulation (Composer-style): weight each micro-batch by its share of the samples in the
        # window, so a short last window averages over its own samples instead of getting 1/k each.
        accumulating = len(window) > 1
        if accumulating:
            counts = [self._samples_in(batch) for batch in window]
            window_samples = sum(counts)
        window_loss = None
        for index, batch in enumerate(window):
            if autocast is None:
                loss, samples = self._forward_loss(batch)
            else:
                with torch.autocast(self.precision.device_type, dtype=autocast):
                    loss, samples = self._forward_loss(batch)
            if accumulating:
                loss = loss * (counts[index] / window_samples)
            # fp16: multiply the loss by the scale so that small gradients do not underflow to zero.
            if scaler is None:
                loss.backward()
            else:
                scaler.scale(loss).backward()
            window_loss = loss.detach() if window_loss is None else window_loss + loss.detach()
        if not accumulating:
            window_samples = samples

        if scaler is not None:
            scaler.unscale_(optimizer)  # clip and log the true gradients, not the scaled ones
        if self.clip_grad_norm is not None:
            # Returns the norm measured before clipping: that is the one worth logging.
            self._last_grad_norm = torch.nn.utils.clip_grad_norm_(self._params, self.clip_grad_norm)
        if self.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(self._params, self.clip_grad_value)

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
        return window_loss, window_samples

    def _forward_loss(self, batch: Any) -> tuple[Tensor, int]:
        """Forward pass and loss for one micro-batch: returns (loss, number of samples)."""
        if not self._checked_first_batch:
            self._check_batch(batch)
        if self.step_fn is not None:
            batch = move_to_device(batch, self.device)
            loss = self.step_fn(self.model, batch)
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
            loss = self.loss_fn(call_model(self.model, inputs), targets)
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
            epochs: int = 1) -> list[dict[str, Any]]:
        """Train for ``epochs`` epochs; returns the per-epoch metrics (also kept in ``self.history``)."""
        if epochs < 0:
            raise ConfigError(f"epochs={epochs} must be >= 0.")
        self.should_stop = False
        self._capture_train_modes()
        for callback in self.callbacks:
            if hasattr(callback, "on_fit_start"):
                callback.on_fit_start(self)
        while self.epoch < epochs and not self.should_stop:
            set_epoch = getattr(getattr(train_loader, "sampler", None), "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)  # DistributedSampler reshuffles only when told the epoch
            self._restore_train_modes()
            logs = self._train_epoch(train_loader)
            if val_loader is not None:
                logs.update(self.evaluate(val_loader, prefix="val_"))
            self._end_epoch(logs)
        for callback in self.callbacks:
            if hasattr(callback, "on_fit_end"):
                callback.on_fit_end(self)
        return self.history

    def _train_epoch(self, loader: Iterable[Any]) -> dict[str, Any]:
        started, steps_before, skipped_before = time.perf_counter(), self.global_step, self.skipped_steps
        loss_sum = torch.zeros((), device=self.device)
        norm_sum, samples_seen = None, 0
        self._loss_terms = None
        term_sums: dict[str, Tensor] = {}
        on_step = [c.on_step_end for c in self.callbacks if hasattr(c, "on_step_end")]
        want_step_logs = bool(on_step or self.loggers)
        batches = _len_or_none(loader)
        windows = -(-batches // self.accumulate) if batches is not None else None
        bar = ProgressBar(windows, desc=f"epoch {self.epoch}", enabled=self.progress)
        show_bar = bar.enabled
        for window in _windows(loader, self.accumulate):
            loss, samples = self._run_window(window)
            loss_sum += loss * samples
            samples_seen += samples
            if self._loss_terms is not None:
                for name, value in self._loss_terms.items():
                    term_sums[name] = term_sums.get(name, 0) + value * samples
            if self._last_grad_norm is not None:
                norm_sum = self._last_grad_norm if norm_sum is None else norm_sum + self._last_grad_norm
            if show_bar:
                bar.update(samples, float(loss))
            if want_step_logs and self.global_step % self.log_every_n_steps == 0:
                logs = self._step_logs(loss)
                for logger in self.loggers:
                    logger.log(logs, self.global_step)
                for callback in on_step:
                    callback(self, logs)
        bar.close()
        steps = self.global_step - steps_before
        if steps == 0:
            raise ConfigError("the training loader yielded no batches: check the dataset length, "
                              "batch_size and drop_last.")
        elapsed = time.perf_counter() - started
        logs: dict[str, Any] = {"epoch": self.epoch, "train_loss": float(loss_sum) / samples_seen}
        for name, value in term_sums.items():
            logs[f"train_{name}"] = float(value) / samples_seen
        logs.update(steps=steps, samples=samples_seen, time_s=elapsed, samples_per_s=samples_seen / elapsed,
                    lr=self.optimizer.param_groups[0]["lr"])
        if norm_sum is not None:
            logs["grad_norm"] = float(norm_sum) / steps
        if self.scaler is not None:
            logs.update(skipped_steps=self.skipped_steps - skipped_before, scale=self.scaler.get_scale())
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

    # ------------------------------------------------------------------ modes
    def _capture_train_modes(self) -> None:
        """Remember each submodule's training flag, so that a frozen BatchNorm stays in eval."""
        if not self.model.training:
            self.model.train()  # the whole model was left in eval (e.g. after loading): train it all
        self._train_modes = [m.training for m in self.model.modules()]

    def _restore_train_modes(self) -> None:
        if self._train_modes is None:
            self.model.train()
            return
        for module, mode in zip(self.model.modules(), self._train_modes):
            module.training = mode

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
        """Mean loss (and ``metrics``) over ``loader``, weighted by batch size, in eval mode."""
        totals: dict[str, float] = {}
        samples_seen = 0
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
                loss = values["loss"]
                if isinstance(loss, Mapping):
                    weights = self.loss_weights or {}
                    for name, value in loss.items():
                        values[f"loss_{name}"] = value
                    values["loss"] = sum(weights.get(n, 1.0) * v for n, v in loss.items())
                for name, value in values.items():
                    totals[name] = totals.get(name, 0.0) + float(value) * samples
                samples_seen += samples
        if samples_seen == 0:
            raise ConfigError("the evaluation loader yielded no batches.")
        return {f"{prefix}{name}": total / samples_seen for name, total in totals.items()}

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
    def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[Tensor]:
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
        return in_optimizer

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


def _len_or_none(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None
