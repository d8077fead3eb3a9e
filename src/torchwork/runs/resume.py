"""Where training is, typed, and how a checkpoint puts it back exactly.

:class:`TrainingState` holds the counters, the data position and the random streams that a checkpoint
must carry for a resumed run to continue bit for bit: the optimizer steps taken and skipped, the epoch
and the micro-batches of it already trained on, the history, and each rank's RNG streams (Python, NumPy,
torch, CUDA, the train loader's own generator at the epoch's start). The engine owns one and asks it for
the epoch's batches; nothing here knows the Trainer.

Example:
    >>> import torch
    >>> from torchwork.runs.resume import TrainingState
    >>> state = TrainingState()
    >>> loader = [torch.full((1,), float(i)) for i in range(4)]
    >>> state.batch_in_epoch = 2  # as if resumed after two batches
    >>> state.epoch_start_rng = {"torch": torch.get_rng_state(), "loader": None}
    >>> [float(b) for b in state.epoch_batches(loader, remember_epoch_start=True)]
    [2.0, 3.0]
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from torchwork.data.lengths import length_or_none
from torchwork.errors import CheckpointError
from torchwork.runs.rng import capture_rng, restore_rng

_END = object()


@dataclass
class TrainingState:
    """The resumable position of a training run (saved in every checkpoint)."""

    global_step: int = 0  # optimizer steps attempted
    skipped_steps: int = 0  # of those, skipped by the GradScaler (inf/NaN gradients)
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of the current epoch already trained on
    history: list[dict[str, Any]] = field(default_factory=list)
    epoch_start_rng: dict[str, Any] | None = None  # torch's and the loader's generator at the epoch's start
    loader_generator: torch.Generator | None = None  # the train loader's own shuffling generator
    resumed_loader_rng: torch.Tensor | None = None  # its state from an end-of-epoch checkpoint

    @property
    def mid_epoch(self) -> bool:
        return self.batch_in_epoch > 0

    def counters(self) -> dict[str, int]:
        return {"global_step": self.global_step, "skipped_steps": self.skipped_steps, "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch}

    def rank_state(self, epoch_totals: Mapping[str, Any] | None) -> dict[str, Any]:
        """What differs between ranks: every RNG stream and, mid-epoch, the epoch's position and totals."""
        mid = self.mid_epoch
        generator = self.loader_generator
        return {"rng": capture_rng(), "epoch_start_rng": self.epoch_start_rng if mid else None,
                "loader_rng": generator.get_state() if generator is not None and not mid else None,
                "epoch_totals": dict(epoch_totals) if mid and epoch_totals is not None else None}

    def restore(self, state: Mapping[str, Any], rank: int, world_size: int) -> Mapping[str, Any]:
        """Take the counters, history and this rank's streams from a checkpoint (RNG last); returns this
        rank's part (its ``epoch_totals`` are the engine's to restore)."""
        counters = state["counters"]
        self.global_step, self.skipped_steps = counters["global_step"], counters["skipped_steps"]
        self.epoch, self.batch_in_epoch = counters["epoch"], counters["batch_in_epoch"]
        own = own_rank_state(state, rank, world_size)
        self.epoch_start_rng = own.get("epoch_start_rng")
        self.resumed_loader_rng = own.get("loader_rng")
        self.history = list(state.get("history", []))
        restore_rng(own["rng"])
        return own

    def epoch_batches(self, loader: Iterable[Any], remember_epoch_start: bool) -> Iterable[Any]:
        """The epoch's batch iterator, positioned after the batches a resumed checkpoint already trained.

        ``remember_epoch_start``: keep the RNG state that decides this epoch's order (for checkpoints).
        """
        generator = getattr(loader, "generator", None)
        self.loader_generator = generator if isinstance(generator, torch.Generator) else None
        if self.batch_in_epoch == 0:
            if self.resumed_loader_rng is not None and self.loader_generator is not None:
                # resumed at an epoch boundary: the loader's own generator continues where it was, so the
                # next epoch's order is not the first epoch's again
                self.loader_generator.set_state(self.resumed_loader_rng)
            self.resumed_loader_rng = None
            if remember_epoch_start:
                # Iterating a shuffling DataLoader draws its order (and its workers' seeds) from these.
                self.epoch_start_rng = {"torch": torch.get_rng_state(),
                                        "loader": generator.get_state() if generator is not None else None}
            return SizedIterator(iter(loader), length_or_none(loader))
        # Mid-epoch resume: replay the epoch's start, then skip what was trained. The skipped batches are
        # loaded, not just counted, so that workers' random augmentations stay in step too.
        self.resumed_loader_rng = None  # the epoch-start state below puts the loader's generator in step
        if self.epoch_start_rng is None:
            raise CheckpointError("the checkpoint is mid-epoch but holds no epoch-start RNG state.")
        resumed_rng = capture_rng()
        torch.set_rng_state(self.epoch_start_rng["torch"])
        if generator is not None and self.epoch_start_rng["loader"] is not None:
            generator.set_state(self.epoch_start_rng["loader"])
        iterator = iter(loader)
        for skipped in range(self.batch_in_epoch):
            if next(iterator, _END) is _END:
                raise CheckpointError(f"the checkpoint was taken after batch {self.batch_in_epoch} of epoch "
                                      f"{self.epoch}, but the loader now has only {skipped}. Resume with the "
                                      "same dataset and batch size.")
        restore_rng(resumed_rng)
        return iterator


def own_rank_state(state: Mapping[str, Any], rank: int, world_size: int) -> Mapping[str, Any]:
    """This rank's RNG and data-position state from a checkpoint, checking the world size."""
    saved_world = state.get("world_size", 1)
    if saved_world != world_size:
        if state["counters"]["batch_in_epoch"] > 0:
            raise CheckpointError(
                f"this checkpoint was written mid-epoch by {saved_world} process(es) and this run has "
                f"{world_size}: the data each rank had already seen cannot be mapped onto a "
                "different number of ranks. Resume with the same world size, or from an end-of-epoch "
                "checkpoint (those work at any world size: weights, optimizer and schedule carry over; "
                "the next epochs' per-rank shuffles follow the new world size).")
        if rank == 0:
            print(f"torchwork: resuming a {saved_world}-process checkpoint with {world_size} "
                  "process(es): weights, optimizer and schedule carry over exactly; data order and random "
                  "streams from here on follow the new world size.", file=sys.stderr)
    per_rank = state.get("per_rank")
    if per_rank:
        return per_rank[rank % len(per_rank)]
    return state


class SizedIterator:
    """An iterator that still knows the loader's length (for the progress bar)."""

    def __init__(self, iterator: Any, length: int | None) -> None:
        self.iterator, self.length = iterator, length

    def __iter__(self) -> Any:
        return self.iterator

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("length unknown")
        return self.length
