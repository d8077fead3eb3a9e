"""The Trainer's settings, grouped by what they are about; each group validates itself when built.

``Trainer(model, optimizer, loss_fn, step=StepOptions(accumulate=4, clip_grad_norm=1.0),
logging=LoggingOptions(log_every_n_steps=10), run=RunOptions("runs"))``. The flat keywords of earlier
versions (``accumulate=4``, ``run_dir="runs"``, ...) still work: :func:`group_keywords` sorts them into
their groups. The Trainer reads each setting from its group (:class:`GroupSetting`) and each counter of
where training is from ``trainer.state`` (:class:`StateView`): neither is copied onto it.

Example:
    >>> from torchwork.engine.options import StepOptions, group_keywords
    >>> groups = group_keywords({"accumulate": 4, "log_every_n_steps": 10})
    >>> groups["step"].accumulate, groups["logging"].log_every_n_steps, groups["run"].run_dir
    (4, 10, None)
    >>> StepOptions(accumulate=0)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: accumulate=0: it is the number of micro-batches per optimizer step and must be an integer from 1 (no accumulation) to 262,144.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypedDict, TypeVar, overload

from torchwork.arguments import check_flag
from torchwork.errors import ConfigError
from torchwork.finite import is_count, is_finite_number
from torchwork.quoting import quote_value
from torchwork.runs.options import RunOptions
from torchwork.threads import check_threads

# micro-batches per optimizer step, at most: an epoch of a million batches then steps about four times
MAX_ACCUMULATE = 2**18

@dataclass(frozen=True)
class StepOptions:
    """How one optimizer step is made.

    Args:
        accumulate: micro-batches per optimizer step; the update equals one batch made of all of them.
        clip_grad_norm: clip the total gradient norm to this value (on unscaled gradients).
        clip_grad_value: clip each gradient element to ``[-v, v]``.
        loss_weights: weights of the named losses when ``loss_fn`` returns a dict (missing names weigh 1).
        keep_fp32: submodule names or classes that run in fp32 under autocast.
        compile: ``False``, ``True`` or ``"auto"`` (compile when a measurement says it pays), or a
            :class:`~torchwork.engine.compiling.CompileOptions`; see :mod:`torchwork.engine.compiling`.
        threads: torch's CPU threads: ``"auto"`` (chosen for the machine as it is, timed on the first real
            steps, re-checked when it changes: :mod:`torchwork.threads`) or a count, always honoured.
        scheduler_interval: when the scheduler steps: ``"step"`` (after every optimizer step), ``"epoch"``
            (once per epoch) or ``"auto"`` (from what the scheduler counts, decided when ``fit`` starts and
            said with the reason: :mod:`torchwork.schedules`).
    """

    accumulate: int = 1
    clip_grad_norm: float | None = None
    clip_grad_value: float | None = None
    loss_weights: Mapping[str, float] | None = None
    keep_fp32: Iterable[str | type] = ()
    compile: Any = False
    threads: int | str = "auto"
    scheduler_interval: str = "auto"

    def __post_init__(self) -> None:
        from torchwork.engine.compiling import CompileOptions
        from torchwork.schedules import check_interval

        CompileOptions.of(self.compile)  # checked before any work starts
        check_threads(self.threads)
        check_interval(self.scheduler_interval)
        k = self.accumulate
        if not is_count(k, 1, MAX_ACCUMULATE):
            raise ConfigError(f"accumulate={quote_value(k)}: it is the number of micro-batches per optimizer "
                              f"step and must be an integer from 1 (no accumulation) to {MAX_ACCUMULATE:,}.")
        for name in ("clip_grad_norm", "clip_grad_value"):
            value = getattr(self, name)
            if value is not None and not (is_finite_number(value) and value > 0):
                raise ConfigError(f"{name}={quote_value(value)} must be a positive finite number (or None to not clip).")
        for term, weight in (self.loss_weights or {}).items():
            if not is_finite_number(weight):
                raise ConfigError(f"loss_weights[{quote_value(term)}]={quote_value(weight)}: a loss term's weight must be a finite "
                                  "number (0 leaves the term out of the loss).")
        object.__setattr__(self, "loss_weights", dict(self.loss_weights) if self.loss_weights else None)
        fp32 = self.keep_fp32
        if isinstance(fp32, (str, type)):
            fp32 = (fp32,)  # one name or class: as if in a list
        items = tuple(fp32) if isinstance(fp32, Iterable) else None
        if items is None or not all(isinstance(item, (str, type)) for item in items):
            raise ConfigError(f"keep_fp32={quote_value(self.keep_fp32)}: pass submodule names or classes, e.g. "
                              "keep_fp32=('norm', torch.nn.LayerNorm).")
        object.__setattr__(self, "keep_fp32", items)


@dataclass(frozen=True)
class EvaluationOptions:
    """What evaluation measures and what the epoch's end decides on.

    Args:
        metrics: ``{"name": fn(outputs, targets)}`` computed during evaluation (batch means).
        epoch_metrics: ``{"name": fn(all_outputs, all_targets)}`` computed once over the whole evaluation
            set, for metrics that are not batch means (macro-F1, AUC).
        early_stopping: an :class:`~torchwork.engine.callbacks.EarlyStopping`, or a metric name to stop on
            (patience 3).
        plateau_monitor: the metric a ReduceLROnPlateau scheduler steps on, once per epoch.
    """

    metrics: Mapping[str, Callable[[Any, Any], Any]] = field(default_factory=dict)
    epoch_metrics: Mapping[str, Callable[[Any, Any], Any]] = field(default_factory=dict)
    early_stopping: Any = None
    plateau_monitor: str = "val_loss"

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", dict(self.metrics or {}))
        object.__setattr__(self, "epoch_metrics", dict(self.epoch_metrics or {}))


@dataclass(frozen=True)
class LoggingOptions:
    """What training reports while it runs.

    Args:
        log_every_n_steps: how often step metrics go to the loggers (and the guard checks).
        progress: show progress (default True): a bar when stderr is a terminal, else a plain line every
            ``progress_every_s`` seconds and at each epoch's end; False: nothing.
        progress_every_s: seconds between plain progress lines (default: env TORCHWORK_PROGRESS_EVERY, else 30).
        loggers: objects with ``log(metrics: dict, step: int)``.
    """

    log_every_n_steps: int = 50
    progress: bool | None = None
    progress_every_s: float | None = None
    loggers: Sequence[Any] = ()

    def __post_init__(self) -> None:
        every = self.log_every_n_steps
        if not _is_number(every) or not isinstance(every, int) or every < 1:
            raise ConfigError(f"log_every_n_steps={every!r} must be an integer >= 1 (the optimizer steps between "
                              "two step logs).")
        if self.progress is not None:
            check_flag(self.progress, "progress")  # progress="no" showed it
        seconds = self.progress_every_s
        if seconds is not None and not (is_finite_number(seconds) and seconds > 0):
            raise ConfigError(f"progress_every_s={quote_value(seconds)} must be a finite number of seconds > 0 (or None: "
                              "env TORCHWORK_PROGRESS_EVERY, else 30).")
        object.__setattr__(self, "loggers", tuple(self.loggers))


@dataclass(frozen=True)
class DistributedOptions:
    """Running as one DDP rank under torchrun.

    Args:
        enabled: run as one rank (default: when torchrun's WORLD_SIZE > 1; False: never).
        timeout_s: how long a collective waits for a silent peer before failing.
        debug: check that every rank runs the same collectives, and name the call site of the first that
            differs (default: env TORCHWORK_DISTRIBUTED_DEBUG=1). Slower; for debugging.
    """

    enabled: bool | None = None
    timeout_s: float = 300.0
    debug: bool | None = None

    def __post_init__(self) -> None:
        for name in ("enabled", "debug"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):  # 1 == True passed
                raise ConfigError(f"distributed {name}={quote_value(getattr(self, name))} must be True, False or "
                                  "None.")
        timeout = self.timeout_s
        if not (is_finite_number(timeout) and timeout > 0):
            raise ConfigError(f"distributed timeout_s={quote_value(timeout)} must be a finite number of seconds > 0 (how long "
                              "a collective waits for a silent peer; default 300).")

    def resolved_debug(self) -> bool:
        return self.debug if self.debug is not None else os.environ.get("TORCHWORK_DISTRIBUTED_DEBUG") == "1"


def _is_number(value: Any) -> bool:
    """An int or a float, not a bool (``True`` is no count or size)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# flat keyword of earlier versions -> (group, field)
_GROUPS: dict[str, type] = {"step": StepOptions, "evaluation": EvaluationOptions, "logging": LoggingOptions,
                            "run": RunOptions, "distributed": DistributedOptions}
_FLAT = {f.name: (group, f.name) for group, cls in _GROUPS.items() if group != "distributed"
         for f in dataclasses.fields(cls)}
_FLAT.update(distributed_timeout_s=("distributed", "timeout_s"), distributed_debug=("distributed", "debug"))


class TrainerKeywords(TypedDict, total=False):
    """The flat keywords ``Trainer(...)`` takes beside the groups, typed, so that an editor completes them
    and a type checker flags a misspelt one (``Trainer(model, optimizer, acumulate=4)``). Each is a field of
    one group; ``tests/engine/test_options.py`` keeps this list equal to the groups'."""

    # StepOptions
    accumulate: int
    clip_grad_norm: float | None
    clip_grad_value: float | None
    loss_weights: Mapping[str, float] | None
    keep_fp32: Iterable[str | type]
    compile: Any
    threads: int | str
    scheduler_interval: str
    # EvaluationOptions
    metrics: Mapping[str, Callable[[Any, Any], Any]]
    epoch_metrics: Mapping[str, Callable[[Any, Any], Any]]
    early_stopping: Any
    plateau_monitor: str
    # LoggingOptions
    log_every_n_steps: int
    progress: bool | None
    progress_every_s: float | None
    loggers: Sequence[Any]
    # RunOptions
    run_dir: str | os.PathLike[str] | None
    checkpoint_every_n_steps: int | None
    keep_checkpoints: int
    checkpoint_monitor: tuple[str, str] | None
    config: Mapping[str, Any]
    tensorboard: bool
    data_splits: Mapping[str, Any]
    # DistributedOptions
    distributed_timeout_s: float
    distributed_debug: bool | None


def group_keywords(keywords: Mapping[str, Any], **given: Any) -> dict[str, Any]:
    """The option groups from ``given`` group objects and flat ``keywords`` (which may not repeat a group
    that was given). ``distributed`` may be a bool (whether to run as a rank)."""
    distributed = given.get("distributed")
    if distributed is None or isinstance(distributed, bool):
        given["distributed"] = None
        flat_distributed = {"enabled": distributed}
    else:
        flat_distributed = {}
    per_group: dict[str, dict[str, Any]] = {group: {} for group in _GROUPS}
    per_group["distributed"].update(flat_distributed)
    for name, value in keywords.items():
        if name not in _FLAT:
            raise TypeError(f"Trainer() got an unexpected keyword argument {name!r}")
        group, field_name = _FLAT[name]
        if given.get(group) is not None:
            raise ConfigError(f"{name}= and {group}= both given: put {field_name} into the "
                              f"{_GROUPS[group].__name__} passed as {group}=.")
        per_group[group][field_name] = value
    return {group: given.get(group) if given.get(group) is not None else cls(**per_group[group])
            for group, cls in _GROUPS.items()}


class GroupSetting:
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


View = TypeVar("View")


class StateView(Generic[View]):
    """A Trainer attribute read from ``trainer.state`` (a :class:`~torchwork.runs.resume.TrainingState`,
    what checkpoints save and restore), under its own name, with ``doc`` as its docstring. Read-only: the
    position of training has one home.

    Example:
        >>> from torchwork.runs.resume import TrainingState
        >>> class Owner:
        ...     global_step = StateView[int]("Optimizer steps attempted.")
        ...     def __init__(self): self.state = TrainingState(global_step=3)
        >>> Owner().global_step, Owner.global_step.__doc__
        (3, 'Optimizer steps attempted.')
        >>> Owner().global_step = 4
        Traceback (most recent call last):
        ...
        AttributeError: owner.global_step is read from owner.state: set owner.state.global_step instead (what checkpoints save and restore).
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, trainer: None, owner: type) -> StateView[View]: ...
    @overload
    def __get__(self, trainer: object, owner: type | None = None) -> View: ...
    def __get__(self, trainer: object, owner: type | None = None) -> StateView[View] | View:
        if trainer is None:
            return self
        value: View = getattr(trainer.state, self.name)  # type: ignore[attr-defined]
        return value

    def __set__(self, trainer: object, value: NoReturn) -> NoReturn:  # a type checker flags an assignment too
        who = type(trainer).__name__.lower()
        raise AttributeError(f"{who}.{self.name} is read from {who}.state: set {who}.state.{self.name} instead "
                             "(what checkpoints save and restore).")
