"""Join the process group torchrun prepared, wrap the model in DDP, shard the data.

NCCL on GPUs, gloo on CPUs. Every collective has a timeout, so a rank that dies makes the others fail
with an error instead of waiting forever (torchrun also tears the job down when one worker exits).
"""

from __future__ import annotations

import atexit
import datetime
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, Sampler

from torchwork.distributed.env import World
from torchwork.distributed.frames import user_call_site

# DistributedError lived here before torchwork.errors held every error class: the old import path still works.
from torchwork.errors import DistributedError as DistributedError
from torchwork.whole_lines import keep_lines_whole

BARRIER_AT_EXIT_S = 10.0


def init_process_group(world: World, timeout_s: float = 300.0, debug: bool = False) -> None:
    """Initialise the default process group from torchrun's environment (a no-op when it exists)."""
    if dist.is_initialized() or not world.is_distributed:
        return
    keep_lines_whole(sys.stdout, sys.stderr)  # the ranks share a terminal: one rank's line never splits another's
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(world.local_rank)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s),
                            **({"device_id": torch.device("cuda", world.local_rank)} if backend == "nccl" else {}))
    # Tear the group down while Python is still alive. Left to interpreter exit, a gloo worker thread that
    # finishes its last all-reduce must take the GIL of a finalizing interpreter; CPython ends that thread
    # with a forced unwind through C++ noexcept code and the rank dies in std::terminate ("terminate called
    # without an active exception", SIGABRT): intermittently, when one rank exits before its peers.
    atexit.register(destroy)
    if debug:
        from torchwork.distributed import debug as collective_debug

        collective_debug.enable(timeout_s=min(timeout_s, 60.0))


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return model
    device_ids = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


class ShardSampler(Sampler[int]):
    """Every ``world_size``-th index from ``rank``, without padding: for evaluation, where ranks may
    see different counts (there are no per-batch collectives) and padding would count samples twice."""

    def __init__(self, length: int, rank: int, world_size: int) -> None:
        self.length, self.rank, self.world_size = length, rank, world_size

    def __iter__(self):
        return iter(range(self.rank, self.length, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.length, self.world_size))


def _rebuild(loader: DataLoader, sampler: Sampler) -> DataLoader:
    return DataLoader(
        loader.dataset, batch_size=loader.batch_size, sampler=sampler, num_workers=loader.num_workers,
        collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, drop_last=loader.drop_last,
        timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
        persistent_workers=loader.persistent_workers)


def shard_loader(loader: Any, world: World, train: bool, seed: int = 0) -> Any:
    """Give a plain DataLoader a DistributedSampler (train) or a ShardSampler (evaluation).

    Training shards are padded to equal length (DistributedSampler repeats a few samples), so every rank
    runs the same number of steps and no collective waits for a rank that has finished. Loaders that
    already shard, and iterables that are not DataLoaders, are returned unchanged.
    """
    if not world.is_distributed or not isinstance(loader, DataLoader):
        return loader
    if loader.batch_sampler is not None and loader.batch_size is None:
        return loader  # a custom batch sampler: the user shards
    sampler = loader.sampler
    if isinstance(sampler, (DistributedSampler, ShardSampler)):
        return loader
    if train:
        shuffle = isinstance(sampler, RandomSampler)
        new = DistributedSampler(loader.dataset, num_replicas=world.world_size, rank=world.rank,
                                 shuffle=shuffle, seed=seed, drop_last=loader.drop_last)
    else:
        new = ShardSampler(len(loader.dataset), world.rank, world.world_size)
    return _rebuild(loader, new)


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few numbers over all ranks (one collective)."""
    if not (dist.is_available() and dist.is_initialized()):
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def check_same_length(length: int | None, device: torch.device) -> None:
    """Refuse loaders whose per-rank batch counts differ: the longer ranks would wait forever."""
    if length is None or not (dist.is_available() and dist.is_initialized()):
        return
    tensor = torch.tensor([length, -length], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    if tensor[0].item() != -tensor[1].item():
        raise DistributedError(
            f"ranks have different numbers of training batches (from {-tensor[1].item()} to "
            f"{tensor[0].item()}); the longer ranks would hang in the gradient all-reduce. Use a "
            "DistributedSampler (torchwork adds one to a plain DataLoader) or drop_last=True.")


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not (dist.is_available() and dist.is_initialized()):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def explain_collective_error(error: BaseException) -> DistributedError | None:
    """Turn PyTorch's collective-mismatch / peer-failure errors into one that names the user's call site."""
    text = str(error)
    if isinstance(error, DistributedError):
        return error
    if "mismatch between collectives" in text or "Mismatch between collective" in text:
        what = "ranks ran different collectives (or the same one with different shapes)"
    elif any(s in text for s in ("Connection closed by peer", "Connection reset by peer", "timed out",
                                 "Timed out", "NCCL communicator was aborted", "Broken pipe")):
        what = ("a peer rank stopped answering (it crashed, was killed, is stuck, or is waiting in a different "
                "collective: set TORCHWORK_DISTRIBUTED_DEBUG=1 to check)")
    else:
        return None
    site = user_call_site(traceback.extract_tb(error.__traceback__))
    where = f" at {site}" if site else ""
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else "?"
    return DistributedError(
        f"rank {rank}: {what}{where}. Every rank must call the same collectives in the same order: look for "
        f"a collective under an `if rank == ...` or a loop whose length differs between ranks. "
        f"PyTorch said: {text.splitlines()[0][:400]}")


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            # Every rank reaches this point before any tears down: a rank that closed its connections while a
            # peer's gloo thread still finished a collective aborted that peer in std::terminate (seen once
            # in a full test run, after this exit handler was added). Bounded: a rank that exits on an error
            # while its peers wait in another collective waits 10 s here, not the group's timeout.
            if dist.get_world_size() > 1 and dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=BARRIER_AT_EXIT_S))
        except Exception:  # a peer that never came: tear down all the same
            pass
        try:
            dist.destroy_process_group()
        except Exception as error:  # pragma: no cover - teardown of a broken group
            print(f"torchwork: process group teardown failed: {error}", file=sys.stderr)
