"""What a Trainer checkpoint holds, typed: one field per entry of the file, in the order it is written.

:class:`TrainerCheckpoint` is the payload of every checkpoint a Trainer writes (``trainer.save``, ``fit``'s
run folder): weights, optimizer, scheduler and scaler states, the counters and the history of
:class:`~torchwork.runs.resume.TrainingState`, each rank's RNG streams and data position, and the callbacks'
states. :meth:`~TrainerCheckpoint.state_dict` gives the plain dict that goes to disk (the format
:mod:`torchwork.runs.checkpoint` writes and checks, unchanged) and
:meth:`~TrainerCheckpoint.load_state_dict` takes one back, validated field by field
(:mod:`torchwork.runs.contents`) before anything is kept. :meth:`~TrainerCheckpoint.capture` takes one
from a Trainer (anything with the public attributes of :class:`Checkpointed`; this module does not import
the Trainer) and :meth:`~TrainerCheckpoint.restore` puts one back into it. Writing and reading the file
(atomic, checksummed, ``weights_only``) is :mod:`torchwork.runs.checkpoint`'s; :func:`write_checkpoint` and
:func:`read_checkpoint` do it once for a whole DDP job (rank 0 writes or reads, the others wait or receive).

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torchwork import Trainer
    >>> from torchwork.engine.checkpoint import TrainerCheckpoint
    >>> model = nn.Linear(4, 1)
    >>> trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), device="cpu")
    >>> _ = trainer.step((torch.randn(8, 4), torch.randn(8, 1)))
    >>> checkpoint = TrainerCheckpoint.capture(trainer)
    >>> checkpoint.counters["global_step"], list(checkpoint.state_dict())[:4]
    (1, ['format_version', 'world_size', 'per_rank', 'model'])
    >>> TrainerCheckpoint().load_state_dict({"counters": [8]}, "c.pt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.CheckpointError: checkpoint c.pt cannot be resumed: 'model' is None, not a mapping. ...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from torchwork.engine.devices import move_to_device
from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import FORMAT_VERSION

if TYPE_CHECKING:
    from torch import nn

    from torchwork.distributed.env import World
    from torchwork.engine.threads import StepThreads
    from torchwork.runs.resume import TrainingState


class Checkpointed(Protocol):
    """What a checkpoint is taken from and restored into (a :class:`~torchwork.Trainer`): public names only."""

    should_stop: bool
    stop_reason: str | None

    @property
    def model(self) -> nn.Module: ...
    @property
    def optimizer(self) -> torch.optim.Optimizer: ...
    @property
    def scheduler(self) -> Any: ...
    @property
    def scaler(self) -> Any: ...
    @property
    def step_fn(self) -> Any: ...
    @property
    def callbacks(self) -> Sequence[Any]: ...
    @property
    def world(self) -> World: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def state(self) -> TrainingState: ...
    @property
    def history(self) -> list[dict[str, Any]]: ...
    @property
    def loop(self) -> Any: ...
    @property
    def cpu_threads(self) -> StepThreads: ...
    @property
    def epoch_totals(self) -> Any: ...


@dataclass
class TrainerCheckpoint:
    """Everything needed to continue training exactly, one field per entry of the checkpoint file.

    Fields (in the file's order): ``format_version``; ``world_size`` and ``per_rank`` (under DDP, each
    rank's RNG streams and data position, as ``rng`` ... ``epoch_totals`` below; None for one process);
    ``model``, ``optimizer``, ``scheduler``, ``scaler`` (their ``state_dict()``; None where there is none);
    ``counters`` (global_step, skipped_steps, epoch, batch_in_epoch); ``rng`` (every RNG stream);
    ``epoch_start_rng`` (mid-epoch: the streams that decided the epoch's order); ``loader_rng`` (at an
    epoch's end: the train loader's own generator); ``epoch_totals`` (mid-epoch: the epoch's running
    totals); ``history`` (one record per epoch); ``callbacks`` (each callback's state, or None);
    ``step_fn`` (a ``step_fn`` object's ``state_dict()``: state it carries across batches, such as a
    truncated-BPTT hidden state; None without one);
    ``threads`` (on the CPU, torch's thread count the run had chosen: a resume with ``threads="auto"`` keeps
    it, so that the continuation computes as the run did; older checkpoints lack it);
    ``stopped`` (at an epoch's end after a callback stopped training, early stopping's reason; None
    otherwise, and in older checkpoints): a resume of a run that stopped trains no further epoch.
    ``extra``: what was written beside these (a run folder's ``best_value`` and ``run``), kept as it was.
    """

    format_version: int = FORMAT_VERSION
    world_size: int = 1
    per_rank: list[dict[str, Any]] | None = None
    model: dict[str, torch.Tensor] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] | None = None
    scaler: dict[str, Any] | None = None
    counters: dict[str, int] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)
    epoch_start_rng: dict[str, Any] | None = None
    loader_rng: torch.Tensor | None = None
    epoch_totals: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    callbacks: list[Any] = field(default_factory=list)
    step_fn: Any = None
    threads: int | None = None
    stopped: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------ the file's dict
    def state_dict(self) -> dict[str, Any]:
        """The checkpoint as the plain dict written to disk: the fields in order, then ``extra``."""
        saved = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**saved, **self.extra}

    def load_state_dict(self, state: Mapping[str, Any], where: Any = "given to load_state_dict") -> None:
        """Take every field from ``state`` (a loaded checkpoint), after checking all of them: a field that
        is not what a checkpoint holds is a :class:`~torchwork.errors.CheckpointError` naming it (``where``
        says which checkpoint), and nothing is kept. Entries an older checkpoint lacks keep their default."""
        from torchwork.runs.contents import check_contents

        check_contents(state, where)
        names = [f.name for f in dataclasses.fields(self) if f.name != "extra"]
        fresh = TrainerCheckpoint()
        for name in names:
            value = state.get(name)
            setattr(self, name, value if value is not None else getattr(fresh, name))
        self.extra = {name: value for name, value in state.items() if name not in names}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], where: Any = "given to load_state_dict") -> TrainerCheckpoint:
        """A checkpoint from the dict :meth:`state_dict` gave (checked: see :meth:`load_state_dict`)."""
        checkpoint = cls()
        checkpoint.load_state_dict(state, where)
        return checkpoint

    # ------------------------------------------------------------------ from and into a Trainer
    @classmethod
    def capture(cls, trainer: Checkpointed) -> TrainerCheckpoint:
        """Everything ``trainer`` needs to continue exactly. Under DDP a collective: every rank contributes
        its RNG streams and data position."""
        from torchwork.runs.checkpoint import clean_state_dict, unwrap_model

        totals = trainer.epoch_totals
        own = trainer.state.rank_state(totals.state_dict() if totals is not None else None)
        per_rank = None
        if trainer.world.is_distributed:
            from torchwork.distributed.setup import gather_object

            per_rank = gather_object(move_to_device(own, torch.device("cpu")))  # each rank resumes its own
        scheduler, scaler = trainer.scheduler, trainer.scaler
        return cls(world_size=trainer.world.world_size, per_rank=per_rank,
                   model=clean_state_dict(unwrap_model(trainer.model).state_dict()),
                   optimizer=trainer.optimizer.state_dict(),
                   scheduler=scheduler.state_dict() if scheduler is not None else None,
                   scaler=scaler.state_dict() if scaler is not None else None,
                   counters=trainer.state.counters(), **own, history=list(trainer.history),
                   callbacks=[c.state_dict() if hasattr(c, "state_dict") else None for c in trainer.callbacks],
                   step_fn=trainer.step_fn.state_dict() if hasattr(trainer.step_fn, "state_dict") else None,
                   threads=_threads_in_use(trainer), stopped=_stop_reason(trainer))

    def restore(self, trainer: Checkpointed) -> dict[str, Any] | None:
        """Put this checkpoint back into ``trainer``: weights, callbacks, optimizer, scheduler, scaler, then
        the counters, history and this rank's RNG streams (last, so nothing after them draws). Returns this
        rank's running totals of the epoch the checkpoint is in (None at an epoch's end): the trainer's to
        continue the epoch with."""
        from torchwork.runs.checkpoint import clean_state_dict, unwrap_model
        from torchwork.runs.contents import check_optimizer_fits

        try:
            unwrap_model(trainer.model).load_state_dict(clean_state_dict(self.model))
        except RuntimeError as error:
            raise CheckpointError(f"the checkpoint's weights do not fit this model: {error}") from None
        # Callbacks first: one that added parameter groups during training (gradual unfreezing) adds them
        # again, so that the optimizer and scheduler states fit.
        for callback, saved in zip(trainer.callbacks, self.callbacks or []):
            if saved is not None and hasattr(callback, "load_state_dict"):
                callback.load_state_dict(saved)
        if self.step_fn is not None and hasattr(trainer.step_fn, "load_state_dict"):
            trainer.step_fn.load_state_dict(self.step_fn)
        check_optimizer_fits(trainer.optimizer, self.optimizer)
        try:
            trainer.optimizer.load_state_dict(self.optimizer)
            if trainer.scheduler is not None and self.scheduler is not None:
                trainer.scheduler.load_state_dict(self.scheduler)
            if trainer.scaler is not None and self.scaler:
                trainer.scaler.load_state_dict(self.scaler)
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise CheckpointError(f"the checkpoint's optimizer, scheduler or scaler state does not fit this "
                                  f"Trainer ({type(error).__name__}: {str(error)[:200]}).") from None
        trainer.cpu_threads.keep_recorded(self.threads)  # under threads="auto" only: a count asked for wins
        # A run that had stopped (early stopping) stays stopped: a resume of it, e.g. the finished first
        # training of a script resumed by `torchwork resume`, trains no epoch more than it did.
        trainer.should_stop, trainer.stop_reason = self.stopped is not None, self.stopped
        world = trainer.world
        own = trainer.state.restore(self.state_dict(), world.rank, world.world_size)  # RNG streams last
        totals = own.get("epoch_totals")
        return move_to_device(dict(totals), trainer.device) if totals else None


def _stop_reason(trainer: Checkpointed) -> str | None:
    """Why training stopped, at an epoch's end where a callback stopped it, or at any step when training
    evaluates every K steps (where a stop ends training at once); None: it goes on."""
    at_once = trainer.loop is not None and trainer.loop.step_based
    if not trainer.should_stop or (trainer.state.batch_in_epoch and not at_once):
        return None
    reasons = [str(reason) for c in trainer.callbacks if (reason := getattr(c, "reason", None))]
    return ("; ".join(reasons) if reasons else "a callback set trainer.should_stop")[:1000]


def _threads_in_use(trainer: Checkpointed) -> int | None:
    """The thread count the run settled on (not a candidate being timed), on the CPU."""
    if trainer.device.type != "cpu":
        return None
    choice = trainer.cpu_threads.choice
    return choice.threads if choice is not None else torch.get_num_threads()


# ------------------------------------------------------------------ one file for a whole (DDP) job
def write_checkpoint(state: Mapping[str, Any], path: str | os.PathLike[str], world: World) -> None:
    """Write ``state`` to ``path`` (:func:`torchwork.runs.checkpoint.save_checkpoint`) from rank 0; under
    DDP every rank calls it, waits for the write (a load right after a save finds the file) and fails
    with it."""
    from torchwork.runs.checkpoint import save_checkpoint

    problem = None
    if world.is_rank_zero:
        try:
            save_checkpoint(state, path)
        except CheckpointError as error:
            problem = error
    if world.is_distributed:
        from torchwork.distributed.setup import broadcast_object

        message = broadcast_object(str(problem) if problem is not None else None)
        if message is not None and problem is None:
            raise CheckpointError(f"rank 0 could not write {path}: {message}")
    if problem is not None:
        raise problem


def read_checkpoint(path: str | os.PathLike[str], world: World, device: torch.device) -> dict[str, Any]:
    """Read a checkpoint (checksum verified, ``weights_only``) onto ``device``; under DDP every rank calls
    it: rank 0 reads the file and sends it to the others (no shared filesystem needed)."""
    from torchwork.runs.checkpoint import load_checkpoint

    if not world.is_distributed:
        return load_checkpoint(path, map_location=device)
    from torchwork.distributed.setup import broadcast_object

    state, message = None, None
    if world.is_rank_zero:
        try:
            state = load_checkpoint(path, map_location="cpu")
        except CheckpointError as error:
            message = str(error)
    state, message = broadcast_object((state, message))
    if message is not None:
        raise CheckpointError(message if world.is_rank_zero else f"rank 0 could not load {path}: {message}")
    return move_to_device(state, device)
