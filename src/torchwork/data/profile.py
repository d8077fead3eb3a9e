"""Is the input pipeline or the model the bottleneck? Measure it, then say what to change.

:func:`profile_loader` runs the real loop (fetch a batch, run the model step) for a fixed number of
batches at several ``num_workers`` values and records, for each:

- samples per second through the whole loop;
- CPU use of this process and its worker processes, as a share of all CPUs (psutil), and how busy each
  data-loading process is (the workers, or the main process when there are none);
- the share of the loop spent waiting for the next batch and the share spent in the model step.

The verdict: the pipeline is the bottleneck when the loop waits for data longer than it computes.
Then the rule is: when the workers cannot fill the CPUs, more workers are not the fix: the items
wait on something (disk, sleep, a lock), so fix the preprocessing (cache, precompute, batch the work).
When the CPUs are full, make each item cheaper. Only when every loading process computes flat out, CPUs
are free and the last worker added still helped is "more workers" the advice. The recommended ``num_workers`` is the fewest workers within 5% of the
best measured throughput.

Example:
    >>> import time, torch
    >>> from torch.utils.data import TensorDataset
    >>> from torchwork.data.profile import profile_loader
    >>> data = TensorDataset(torch.zeros(64, 4), torch.zeros(64, dtype=torch.long))
    >>> report = profile_loader(data, batch_size=8, num_workers=[0], batches=4, step=lambda b: time.sleep(0.01))
    >>> report.bottleneck
    'model'
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import check_count

CPU_FULL_PERCENT = 85.0  # a pipeline using this much of all CPUs is computing, not waiting
WITHIN_BEST = 0.95  # recommend the fewest workers whose throughput is at least this share of the best
MAX_BATCHES = 100_000  # timed batches, warm-up batches or rounds a setting: more than any profile needs


@dataclasses.dataclass
class ProfileRow:
    num_workers: int
    samples_per_s: float
    cpu_percent: float
    data_busy: float  # CPU use of each data-loading process (the workers, else the main process), 0..1
    wait_fraction: float
    step_fraction: float
    seconds: float
    batches: int


@dataclasses.dataclass
class ProfileReport:
    """Measurements per ``num_workers``, the verdict and the advice."""

    rows: list[ProfileRow]
    cpus: int
    batch_size: int
    recommended_num_workers: int
    bottleneck: str  # "pipeline" or "model"
    advice: str
    model_samples_per_s: float | None

    @property
    def best(self) -> ProfileRow:
        return max(self.rows, key=lambda r: r.samples_per_s)

    @property
    def recommended(self) -> ProfileRow:
        return next(r for r in self.rows if r.num_workers == self.recommended_num_workers)

    def to_dict(self) -> dict[str, Any]:
        return {"cpus": self.cpus, "batch_size": self.batch_size, "bottleneck": self.bottleneck,
                "recommended_num_workers": self.recommended_num_workers,
                "model_samples_per_s": self.model_samples_per_s, "advice": self.advice,
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    def __str__(self) -> str:
        lines = [f"input pipeline profile: batch size {self.batch_size}, {self.cpus} CPUs",
                 "workers  samples/s  CPU (all)  loader busy  waiting for data  in model step"]
        for r in self.rows:
            mark = "  <- recommended" if r.num_workers == self.recommended_num_workers else ""
            lines.append(f"{r.num_workers:>7}  {r.samples_per_s:>9,.0f}  {r.cpu_percent:>8.0f}%  "
                         f"{r.data_busy:>11.0%}  {r.wait_fraction:>16.0%}  {r.step_fraction:>13.0%}{mark}")
        if self.model_samples_per_s is not None:
            lines.append(f"model step alone: {self.model_samples_per_s:,.0f} samples/s")
        lines.append(f"bottleneck: {self.bottleneck}")
        lines.append(self.advice)
        return "\n".join(lines)


def _tree_cpu_seconds(process: Any) -> dict[int, float]:
    import psutil

    times: dict[int, float] = {}
    for p in [process, *process.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:  # a worker that exited between listing and asking
            continue
        times[p.pid] = t.user + t.system
    return times


def _rows(batch: Any) -> int:
    """Samples in a batch: the length of the targets of an (inputs, targets) pair, else of the batch."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and hasattr(batch[1], "__len__"):
        return len(batch[1])
    return len(batch) if hasattr(batch, "__len__") else 0


def _measure(make_loader: Callable[[int], Any], workers: int, batches: int, warmup: int,
             step: Callable[[Any], Any] | None, cpus: int) -> tuple[ProfileRow, list[float]]:
    import psutil

    data = make_loader(workers)
    iterator = iter(data)

    def next_batch() -> Any:
        nonlocal iterator
        try:
            return next(iterator)
        except StopIteration:  # a small dataset: start another epoch (persistent workers stay up)
            iterator = iter(data)
            return next(iterator)

    try:
        for _ in range(warmup):  # worker start-up and the first prefetch are not the steady state
            batch = next_batch()
            if step is not None:
                step(batch)
        process = psutil.Process()
        cpu_before = _tree_cpu_seconds(process)
        waited = stepped = 0.0
        samples = 0
        step_times: list[float] = []
        started = time.perf_counter()
        for _ in range(batches):
            t0 = time.perf_counter()
            batch = next_batch()
            t1 = time.perf_counter()
            if step is not None:
                step(batch)
            t2 = time.perf_counter()
            waited += t1 - t0
            stepped += t2 - t1
            step_times.append(t2 - t1)
            samples += _rows(batch)
        seconds = time.perf_counter() - started
        cpu_after = _tree_cpu_seconds(process)
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:  # join the workers now, not whenever the garbage collector runs
            shutdown()
    used = {pid: max(0.0, t - cpu_before.get(pid, 0.0)) for pid, t in cpu_after.items()}
    cpu = sum(used.values())
    main = used.get(process.pid, 0.0)
    data_busy = (cpu - main) / (seconds * workers) if workers else main / seconds
    row = ProfileRow(num_workers=workers, samples_per_s=samples / seconds,
                     # CPU times tick in 10 ms steps, so a short window can read a little over 100%
                     cpu_percent=min(100.0, 100.0 * cpu / (seconds * cpus)),
                     data_busy=min(1.0, data_busy), wait_fraction=waited / seconds,
                     step_fraction=stepped / seconds, seconds=seconds, batches=batches)
    return row, step_times


def default_worker_counts(cpus: int) -> list[int]:
    """0, 1, 2, 4, ... up to the number of CPUs (and the CPU count itself)."""
    counts, n = [0], 1
    while n < cpus:
        counts.append(n)
        n *= 2
    return sorted({*counts, cpus})


def profile_loader(dataset: Any, batch_size: int = 64, *, num_workers: Sequence[int] | None = None,
                   batches: int = 20, warmup: int = 2, step: Callable[[Any], Any] | None = None,
                   seed: int = 0, rounds: int = 2, **loader_options: Any) -> ProfileReport:
    """Profile :func:`torchwork.data.loader` over ``dataset`` at each of ``num_workers``.

    ``step(batch)`` is one training step of your model (forward, backward, optimizer step); without it
    the loop only loads data and the verdict compares the pipeline against nothing (it says so).
    Each setting is measured ``rounds`` times, in turn with the others, and keeps its fastest round.
    ``loader_options`` go to :func:`~torchwork.data.loader` (e.g. ``preprocessor=``).
    """
    from torchwork.data.loaders import available_cpus, check_loader_sizes, loader

    check_count(batches, "batches", 1, MAX_BATCHES, " (batches timed per setting)")
    check_count(rounds, "rounds", 1, MAX_BATCHES, " (rounds of each setting, in turn)")
    check_count(warmup, "warmup", 0, MAX_BATCHES, " (batches loaded before the timing)")
    cpus = available_cpus()
    counts = sorted(set(num_workers if num_workers is not None else default_worker_counts(cpus)))
    if not counts or counts[0] < 0:
        raise ConfigError(f"num_workers={list(counts)} must list worker counts >= 0, e.g. [0, 1, 2].")
    check_loader_sizes(batch_size, counts[-1])  # every setting before the first is measured

    def make_loader(workers: int) -> Any:
        return loader(dataset, batch_size, shuffle=True, seed=seed, num_workers=workers, **loader_options)

    # Rounds go over all settings in turn and each setting keeps its best round: a stall of the machine
    # (another process, memory being faulted in) then cannot decide the comparison on its own.
    best_rows: dict[int, ProfileRow] = {}
    step_times: list[float] = []
    for _ in range(rounds):
        for workers in counts:
            row, times = _measure(make_loader, workers, batches, warmup, step, cpus)
            if workers not in best_rows or row.samples_per_s > best_rows[workers].samples_per_s:
                best_rows[workers] = row
            step_times += times
    rows = [best_rows[w] for w in counts]
    model_rate = None
    if step is not None and step_times:
        median = sorted(step_times)[len(step_times) // 2]
        model_rate = batch_size / median if median > 0 else float("inf")
    return _verdict(rows, cpus, batch_size, model_rate, step is not None)


def _verdict(rows: list[ProfileRow], cpus: int, batch_size: int, model_rate: float | None,
             has_step: bool) -> ProfileReport:
    best = max(rows, key=lambda r: r.samples_per_s)
    chosen = next(r for r in rows if r.samples_per_s >= WITHIN_BEST * best.samples_per_s)
    n = chosen.num_workers
    if has_step and chosen.wait_fraction <= chosen.step_fraction:
        bottleneck = "model"
        advice = (f"The model is the bottleneck: with num_workers={n} the loop waits for data "
                  f"{chosen.wait_fraction:.0%} of the time and computes {chosen.step_fraction:.0%}. More "
                  "workers will not help; make the step faster instead (a larger batch, mixed precision, "
                  f"a GPU, torch.compile). Keep num_workers={n}.")
        return ProfileReport(rows, cpus, batch_size, n, bottleneck, advice, model_rate)
    head = ("The input pipeline is the bottleneck: " if has_step else
            "No model step was given, so this measures the pipeline alone: ")
    waiting = (f"with num_workers={n} the loop waits for data {chosen.wait_fraction:.0%} of the time and "
               f"computes {chosen.step_fraction:.0%}. ")
    if best.cpu_percent >= CPU_FULL_PERCENT:
        cause = (f"The CPUs are already {best.cpu_percent:.0f}% busy at the best setting "
                 f"(num_workers={best.num_workers}), so more workers cannot help: make each item cheaper "
                 "(decode and tokenize once and cache the result, store uint8 tensors, replace per-item "
                 "Python work with work on whole batches).")
    elif best.data_busy < CPU_FULL_PERCENT / 100:
        cause = (f"At num_workers={best.num_workers} each data-loading process computes only "
                 f"{best.data_busy:.0%} of the time and the CPUs are {best.cpu_percent:.0f}% busy: the items "
                 "wait on something other than computation (disk or network reads, sleeps, locks). Fix the "
                 "preprocessing rather than adding workers: preload or cache the data in memory, read in "
                 "larger chunks, and move slow work out of __getitem__.")
    elif best.num_workers == rows[-1].num_workers and best.num_workers < cpus:
        cause = (f"Each data-loading process is busy ({best.data_busy:.0%}) and the CPUs are only "
                 f"{best.cpu_percent:.0f}% used, and throughput still grew with the last worker added: "
                 f"measure num_workers up to {cpus}.")
    else:
        cause = (f"Workers beyond num_workers={best.num_workers} were measured and did not help, although "
                 f"the CPUs are {best.cpu_percent:.0f}% used: handing batches between processes costs as much "
                 "as the work itself. Fix the preprocessing: do the costly part once (clean and tokenize the "
                 "texts ahead of training) or load larger batches.")
    advice = head + waiting + cause + f" Meanwhile use num_workers={n}."
    return ProfileReport(rows, cpus, batch_size, n, "pipeline", advice, model_rate)


# ---------------------------------------------------------------------------------------------------
# `torchwork data ...` commands


def loader_options(splits: Any) -> dict[str, Any]:
    """What :func:`profile_loader` needs beyond the dataset: a preprocessor fit on train for text."""
    if not isinstance(splits.train[0][0], str):
        return {}
    from torchwork.data.text import TextPreprocessor

    return {"preprocessor": TextPreprocessor.fit(splits.train.texts, min_freq=2, max_length=64)}


def small_model_step(splits: Any, preprocessor: Any = None) -> Callable[[Any], None]:
    """A real small training step for the dataset: EmbeddingBag for text (needs the preprocessor), an
    MLP for images."""
    import torch
    from torch import nn

    first = splits.train[0][0]
    if isinstance(first, str):
        if preprocessor is None:
            raise ConfigError("a text model step needs the TextPreprocessor that numbers the tokens.")
        embed = nn.EmbeddingBag(preprocessor.vocab_size, 64, mode="mean", padding_idx=0)
        head = nn.Linear(64, len(splits.classes))
        params = [*embed.parameters(), *head.parameters()]

        def forward(inputs: Any) -> torch.Tensor:
            ids, _lengths = inputs
            return head(embed(ids))
    else:
        model = nn.Sequential(nn.Flatten(), nn.Linear(first.numel(), 256), nn.ReLU(),
                              nn.Linear(256, len(splits.classes)))
        params = list(model.parameters())
        forward = model
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step(batch: Any) -> None:
        inputs, targets = batch
        optimizer.zero_grad(set_to_none=True)
        loss_fn(forward(inputs), targets).backward()
        optimizer.step()

    return step
