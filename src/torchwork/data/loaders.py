"""``loader()``: a DataLoader with the settings people forget, chosen for this machine.

- Seeded: one ``torch.Generator`` drives shuffling and the per-worker base seeds, and every worker seeds
  ``random`` and NumPy from it (:func:`seed_worker`), so augmentations repeat run to run.
- ``persistent_workers`` whenever there are workers (no start-up cost every epoch).
- ``pin_memory`` only when the batches go to a GPU (it costs time and locked memory otherwise).
- ``num_workers`` defaults to :func:`default_num_workers` (the rule is written there).
- Text: pass a :class:`~torchwork.data.text.TextPreprocessor` and batches become
  ``((ids, lengths), labels)``: ids LongTensor (B, L) padded with 0, lengths and labels LongTensor (B,).
  The engine then calls ``model(ids, lengths)``.

Example:
    >>> from torchwork.data import load_dataset, loader
    >>> digits = load_dataset("digits")
    >>> images, labels = next(iter(loader(digits.train, batch_size=32, shuffle=True, num_workers=0)))
    >>> tuple(images.shape), tuple(labels.shape)
    ((32, 1, 8, 8), (32,))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from torchwork.data.text import TextCollate, TextPreprocessor, check_max_length
from torchwork.errors import ConfigError, DataError
from torchwork.finite import check_count
from torchwork.seeding import check_seed, seed_worker  # seed_worker re-exported: one seed, one place


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def default_num_workers() -> int:
    """The default ``num_workers``: the CPUs this process may use, shared among the processes of one
    machine (``LOCAL_WORLD_SIZE`` under torchrun), minus one CPU left for the training loop itself,
    and at most 8 (more rarely pays and each worker holds a copy of the dataset's Python objects).

    On a 2-CPU machine that is 1 worker: the next batch is prepared while the model computes. With a
    single CPU it is 0. ``torchwork data profile`` measures whether another value is faster.
    """
    share = available_cpus() // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(0, min(8, share - 1))


MAX_BATCH_SIZE = 2**20  # a million rows a batch; torch's sampler overflows at 2**63 (the recipes cap alike)
# Batches each worker loads ahead (torch's default is 2): every one waits in memory, so past a few dozen
# only memory grows; 256 is far beyond any that pays.
MAX_PREFETCH = 256


def most_workers() -> int:
    """The most ``num_workers`` a loader may start: 4 per CPU this process may use, 8 at least (workers
    waiting on disk or network can outnumber the CPUs; each is a process holding a copy of the dataset)."""
    from torchwork.threads import usable_cpus

    return max(8, 4 * usable_cpus())


def check_loader_sizes(batch_size: int, num_workers: int | None = None) -> int:
    """``batch_size`` as an int; a batch size outside ``[1, 2**20]`` and a worker count outside
    ``[0, most_workers()]`` (or either not an integer) refused before any loader is made or worker started.

    Example:
        >>> check_loader_sizes(10**20)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: batch_size=100000000000000000000 must be an integer in [1, 1048576] (2**20).
    """
    size = check_count(batch_size, "batch_size", 1, MAX_BATCH_SIZE, " (2**20)")
    if num_workers is not None:
        check_count(num_workers, "num_workers", 0, most_workers(), " (0 loads in the main process; the most is 4 "
                    "worker processes per usable CPU, 8 at least: more only wait for the CPUs and each holds the "
                    "dataset)")
    return size


def _uses_gpu(device: str | torch.device | None) -> bool:
    if device is None:
        return False
    if device == "auto":
        return torch.cuda.is_available()
    return torch.device(device).type == "cuda"


def loader(dataset: Dataset, batch_size: int = 32, *, shuffle: bool = False, seed: int = 0,
           num_workers: int | None = None, preprocessor: TextPreprocessor | None = None,
           max_length: int | None = None, collate_fn: Callable[[list[Any]], Any] | None = None,
           balance: bool = False, device: str | torch.device | None = "auto", drop_last: bool = False,
           prefetch_factor: int | None = None) -> DataLoader:
    """A seeded ``DataLoader`` for ``dataset``.

    ``balance=True`` draws with a :func:`~torchwork.data.balance.balanced_sampler` (every class equally
    often, with replacement) instead of shuffling; it needs ``dataset.labels``. ``device`` is where the
    batches will go: pinned memory is used only for CUDA. ``preprocessor`` turns ``(text, label)`` items
    into padded ``((ids, lengths), labels)`` batches (``max_length`` caps L).
    """
    batch_size = check_loader_sizes(batch_size, num_workers)  # an int, as torch's sampler takes it
    check_seed(seed)
    max_length = check_max_length(max_length)
    if prefetch_factor is not None:
        prefetch_factor = check_count(prefetch_factor, "prefetch_factor", 1, MAX_PREFETCH,
                                      " (batches each worker loads ahead), or None for torch's 2")
    try:
        size = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        raise DataError(f"loader() needs a map-style Dataset with __len__, got {type(dataset).__name__}.") from None
    if size == 0:
        raise DataError(f"the {type(dataset).__name__} passed to loader() is empty.")
    if preprocessor is not None and collate_fn is not None:
        raise ConfigError("pass either preprocessor= (padding collate for text) or collate_fn=, not both.")
    workers = default_num_workers() if num_workers is None else num_workers
    sampler = None
    if balance:
        from torchwork.data.balance import balanced_sampler

        labels = getattr(dataset, "labels", None)
        if labels is None:
            raise DataError(f"balance=True needs the class of every row, but {type(dataset).__name__} has no "
                            ".labels attribute. Add one, or pass labels to balanced_sampler() yourself.")
        sampler, shuffle = balanced_sampler(labels, seed=seed), False
    if preprocessor is not None:
        collate_fn = TextCollate(preprocessor, max_length)
    extra: dict[str, Any] = {}
    if workers > 0:
        extra = {"worker_init_fn": seed_worker, "persistent_workers": True}
        if prefetch_factor is not None:
            extra["prefetch_factor"] = prefetch_factor
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler, num_workers=workers,
                      collate_fn=collate_fn, pin_memory=_uses_gpu(device), drop_last=drop_last,
                      generator=torch.Generator().manual_seed(seed), **extra)
