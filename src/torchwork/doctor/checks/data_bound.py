"""data-bound: most of the training loop's time is spent waiting for the DataLoader."""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from torchwork.doctor.checks import Check


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS/Windows
        return os.cpu_count() or 1


class _IterStats:
    __slots__ = ("loader", "first", "last", "wait", "batches", "where")

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.first: float | None = None
        self.last = 0.0
        self.wait = 0.0
        self.batches = 0
        self.where: tuple[str, int] | None = None


class DataBound(Check, id="data-bound", severity="warning"):
    min_wait_s = 1.0  # below this much waiting in total, nothing is worth reporting
    min_fraction = 0.5

    def setup(self) -> None:
        self.stats: dict[int, _IterStats] = {}
        self.finished: list[_IterStats] = []

    def install(self) -> None:
        check, session = self, self.session

        def make_iter(original: Any) -> Any:
            def __iter__(loader: DataLoader) -> Any:
                iterator = original(loader)
                if isinstance(iterator, _BaseDataLoaderIter):
                    check._start(iterator, loader)
                return iterator
            return __iter__

        def make_next(original: Any) -> Any:
            def __next__(iterator: Any) -> Any:
                stats = check.stats.get(id(iterator))
                started = time.perf_counter()
                try:
                    with session.suspended():
                        return original(iterator)
                except StopIteration:
                    check._stop(iterator)
                    raise
                finally:
                    if stats is not None:
                        ended = time.perf_counter()
                        if stats.first is None:
                            stats.first, stats.where = started, session.where()
                        stats.wait += ended - started
                        stats.last = ended
                        stats.batches += 1
                        session.loader = weakref.ref(stats.loader) if stats.loader is not None else None
            return __next__

        self.session.patch(DataLoader, "__iter__", make_iter)
        self.session.patch(_BaseDataLoaderIter, "__next__", make_next)

    def _start(self, iterator: Any, loader: DataLoader) -> None:
        previous = self.stats.pop(id(iterator), None)
        if previous is not None and previous.batches:
            self.finished.append(previous)
        self.stats[id(iterator)] = _IterStats(loader)

    def _stop(self, iterator: Any) -> None:
        stats = self.stats.pop(id(iterator), None)
        if stats is not None and stats.batches:
            self.finished.append(stats)

    def finish(self) -> None:
        runs = self.finished + [s for s in self.stats.values() if s.batches]
        if not runs:
            return
        wait = sum(s.wait for s in runs)
        span = sum(s.last - s.first for s in runs if s.first is not None)
        if wait < self.min_wait_s or span <= 0 or wait / span < self.min_fraction:
            return
        worst = max(runs, key=lambda s: s.wait)
        loader = worst.loader
        workers = getattr(loader, "num_workers", 0)
        cpus = cpu_count()
        if workers < cpus:
            fix = (f"Load in parallel: DataLoader(..., num_workers={min(cpus, 8)}, pin_memory=True on GPU, "
                   "persistent_workers=True); move heavy preprocessing out of __getitem__ (precompute once, "
                   "or do it on batches on the device).")
        else:
            fix = ("The workers are already as many as the CPUs: make __getitem__ cheaper (cache decoded "
                   "data, precompute features, read larger chunks), or preprocess on the device.")
        self.report(
            f"The training loop spent {wait:.1f} s of {span:.1f} s ({100 * wait / span:.0f}%) waiting for the "
            f"DataLoader (num_workers={workers}, {cpus} CPU(s) available): the model waits for data.",
            fix, where=worst.where)

