"""Compute threads chosen for the machine as it is: the CPUs this process may use, less what others use now.

torch starts one thread per core whatever else runs. Beside a busy neighbour that loses badly: every
parallel region waits at its barrier for the thread the neighbour has descheduled (a 2-layer transformer
step on a 2-core machine beside a busy process: 1.40 s with 1 thread, 3.53 s with 2). ``threads="auto"``
(the :class:`~torchwork.Trainer`'s default, the recipes' ``threads: 0``) therefore:

1. counts the CPUs this process may use: its affinity mask and its cgroup's CPU quota
   (:func:`usable_cpus`), not ``os.cpu_count()``;
2. reads the CPU other processes use now (:func:`busy_cpus`, from ``/proc/stat`` less this process's own
   time) and starts from the CPUs left free, rounded, at least one: the documented default;
3. times whole loop iterations (the step, the batch's fetch and whatever else the loop does) at the
   candidate counts (:func:`thread_candidates`: that default, half of it and all usable CPUs) in interleaved
   blocks, each at least ``steps`` iterations and :data:`BLOCK_S` long, so that short steps are timed in bulk,
   and keeps the default unless another count is faster by more than the spread of the blocks. The timing
   stops after a round as soon as the answer is clear (a count faster or slower beyond the spread, or all
   within half of it: noise, the default kept; a count :data:`CLEARLY_SLOWER` than the default is timed no
   more), and never takes more than :data:`MEASURE_SHARE` of the
   run's planned steps: a run too short to time the counts in that keeps the default untimed. Timing the
   iterations, not the bare step, matters on a quiet machine too: the sentiment recipe's n-gram model
   trained at 13.6-14.9k samples/s on one thread against 11.8-12.2k on two (2 cores, nothing else running),
   although its bare step is faster on two;
4. says its choice and the reason, and checks again when the CPU others use changes by a CPU or the
   throughput falls by more than a third (a neighbour started).

An explicit ``threads=N`` always wins. This module imports torch only inside the functions that set it.

Example:
    >>> from torchwork.threads import choose_threads, usable_cpus
    >>> choose_threads(1).threads, choose_threads(1).reason
    (1, 'threads=1 as asked')
    >>> 1 <= choose_threads("auto").threads <= usable_cpus()
    True
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_count
from torchwork.quoting import quote_value

BLOCK_S = 0.05  # a timed block of iterations at one count lasts at least this long (short steps in bulk)
MEASURE_SHARE = 0.05  # timing the counts takes at most this share of a run's planned steps, all checks together
MIN_ROUNDS = 2  # rounds of blocks before the spread can be read (and the timing stop early)
CLEARLY_SLOWER = 2.0  # a count this many times slower than the default in a round is timed no more
OTHER_WORK = 10.0  # after the choice, an iteration this many times the measured one did other work too
RECHECK_FALL = 1 / 3  # re-check when throughput falls by more than this share of the chosen count's
RECHECK_MARGIN = 0.25  # ... or when the CPU others use gives another free count even this much either side
WINDOW_S = 2.0  # throughput and the neighbours' CPU are read over windows of at least this long
READ_S = 0.1  # the neighbours' CPU at the start is read over at least this long
# An explicit count above this (and above 4 per usable CPU) is refused: more threads than that is a mistake
# (a million crashed the process), while a fixed floor keeps a config with threads=64 valid on a laptop.
MAX_TIMING_ROUNDS = 1000  # interleaved rounds: each times a block per count; a plan of more never ends
MAX_BLOCK_STEPS = 1_000_000  # the fewest iterations in a timed block, at most
MAX_THREADS = 1024


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by its cgroup's CPU quota, at least 1.

    Example:
        >>> usable_cpus() >= 1
        True
    """
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        count = min(count, max(1, math.floor(quota)))
    return max(1, count)


def cgroup_cpu_quota() -> float | None:
    """The CPUs this process's cgroup may use per period (cgroup v2 ``cpu.max`` or v1 ``cfs_quota_us``),
    or None when unlimited or unknown."""
    for directory in _cgroup_dirs():
        v2 = directory / "cpu.max"
        if v2.is_file():
            quota, _, period = v2.read_text().strip().partition(" ")
            if quota != "max" and period:
                return int(quota) / int(period)
        v1 = directory / "cpu.cfs_quota_us"
        if v1.is_file():
            quota_us = int(v1.read_text())
            period_us = int((directory / "cpu.cfs_period_us").read_text())
            if quota_us > 0 and period_us > 0:
                return quota_us / period_us
    return None


def _cgroup_dirs() -> list[Path]:
    root = Path("/sys/fs/cgroup")
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" or "cpu" in controllers.split(","):
            base = root if controllers == "" else root / controllers
            for candidate in (base / path.lstrip("/"), base):
                if candidate.is_dir() and candidate not in found:
                    found.append(candidate)
    return found


def _cpu_jiffies(cpus: set[int] | None) -> tuple[int, int]:
    """(busy, total) jiffies of the given CPUs since boot, from /proc/stat."""
    busy = total = 0
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(values)
        busy += sum(values) - values[3] - values[4]
    return busy, total


class CpuReader:
    """The CPU other processes used between two readings: all CPU time on this process's CPUs, less its own.

    Example:
        >>> reader = CpuReader()
        >>> reader.others() >= 0.0
        True
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        try:
            self._cpus: set[int] | None = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._cpus = None
        self._last = self._read()

    def _read(self) -> tuple[float, int, int]:
        busy, total = _cpu_jiffies(self._cpus)
        return time.process_time(), busy, total

    def others(self) -> float:
        """CPUs (a float) that other processes kept busy since the last reading (or since construction)."""
        own, busy, total = self._read()
        last_own, last_busy, last_total = self._last
        self._last = own, busy, total
        if total <= last_total:
            return 0.0
        cpus = len(self._cpus) if self._cpus is not None else os.cpu_count() or 1
        seconds = (total - last_total) / cpus / os.sysconf("SC_CLK_TCK")
        busy_cpus = (busy - last_busy) / os.sysconf("SC_CLK_TCK") / seconds
        return max(0.0, busy_cpus - (own - last_own) / seconds)


def busy_cpus(interval_s: float = READ_S, reader: CpuReader | None = None) -> float:
    """CPUs other processes are using now (a float), read over ``interval_s``; 0.0 where /proc is missing.

    ``reader``: one made when the work that needs the reading began (a Trainer's ``fit``): the time since
    counts, and only the rest of ``interval_s`` is waited (a reader older than :data:`WINDOW_S` is not used).

    Example:
        >>> 0.0 <= busy_cpus(0.05)
        True
    """
    try:
        if reader is None or time.monotonic() - reader.started > WINDOW_S:
            reader = CpuReader()
    except OSError:
        return 0.0
    time.sleep(max(0.0, interval_s - (time.monotonic() - reader.started)))
    return reader.others()


_recent: tuple[float, float] | None = None  # (when, busy): one reading serves the Trainers made within a second


def recent_busy_cpus(max_age_s: float = 1.0, reader: CpuReader | None = None) -> float:
    """:func:`busy_cpus` (over what is left of its interval since ``reader`` was made), or the reading this
    process took less than ``max_age_s`` ago."""
    global _recent
    now = time.monotonic()
    if _recent is None or now - _recent[0] > max_age_s:
        _recent = (now, busy_cpus(reader=reader))
    return _recent[1]


def thread_candidates(usable: int, default: int) -> list[int]:
    """The counts ``threads="auto"`` times: ``default`` (the free CPUs), half of it and all usable CPUs.

    Example:
        >>> thread_candidates(1, 1), thread_candidates(2, 2), thread_candidates(2, 1), thread_candidates(8, 5)
        ([1], [1, 2], [1, 2], [2, 5, 8])
    """
    return sorted({max(1, default // 2), default, usable})


def free_cpus(usable: int, busy: float) -> int:
    """The documented default of ``threads="auto"``: usable CPUs less the busy ones, rounded, at least 1.

    Example:
        >>> free_cpus(2, 0.2), free_cpus(2, 1.0), free_cpus(2, 7.5), free_cpus(8, 2.6)
        (2, 1, 1, 5)
    """
    return max(1, min(usable, round(usable - busy)))


@dataclasses.dataclass
class ThreadChoice:
    """What ``threads="auto"`` chose and why; ``step_s`` holds the median measured step per thread count."""

    threads: int
    reason: str
    usable: int = 1
    busy: float = 0.0
    step_s: dict[int, float] = dataclasses.field(default_factory=dict)
    spread: float | None = None

    def describe(self) -> str:
        """One line: the count and the reason."""
        return f"threads: {self.threads} ({self.reason})"


def passive_waiting() -> bool:
    """Make OpenMP's idle threads sleep instead of spin (``OMP_WAIT_POLICY=PASSIVE``), unless the user set a
    policy or torch (whose libgomp reads it once, at load) is already imported; True when it was set.

    Measured (benchmarks/busy_machine.py, a 2-core machine beside a one-core neighbour, the transformer
    training step): 2 threads 3.36 s per step passive against 12.75 s spinning (3.8x); 1 thread alike (0.98x).
    The ``torchwork`` command calls it before anything imports torch.
    """
    import sys

    if "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def max_threads() -> int:
    """The most threads an explicit count may ask for: :data:`MAX_THREADS`, or 4 per usable CPU on a machine
    with more than 256 of them."""
    return max(MAX_THREADS, 4 * usable_cpus())


def check_threads(threads: Any, what: str = "threads") -> int | None:
    """``threads`` as an int (explicit) or None (auto); a ConfigError for anything else, and for a count
    above :func:`max_threads` (torch would try to start them all: a process asked for a million threads
    crashed in the allocator).

    Example:
        >>> check_threads("auto"), check_threads(0), check_threads(3)
        (None, None, 3)
    """
    if threads in ("auto", 0, None):
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ConfigError(f"{what}={quote_value(threads)}: use 'auto' (or 0) to choose for the machine, or a thread count "
                          ">= 1.")
    if threads > MAX_THREADS and threads > (ceiling := max_threads()):
        raise ConfigError(f"{what}={quote_value(threads)} is more than the {ceiling} threads allowed (this process may use "
                          f"{usable_cpus()} CPUs): use 'auto' (or 0) to choose for the machine, or a count up to "
                          f"{usable_cpus()}.")
    return threads


def set_threads(threads: int) -> None:
    """Set torch's intra-op thread count (a no-op when it already is that)."""
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def choose_threads(threads: int | str | None = "auto", step: Callable[[], Any] | None = None, *,
                   steps: int = 2, rounds: int = 3, apply: bool = True,
                   say: Callable[[str], Any] | None = None) -> ThreadChoice:
    """Choose torch's thread count for this machine now (see the module's docstring); ``apply`` sets it.

    ``step`` is one real unit of work (a training step, a batch of inference): with it, blocks of calls at
    each candidate count are timed in ``rounds`` interleaved rounds; without it, the free CPUs' count is
    taken unmeasured. Tuning workers call it once each, before their trial. ``say`` receives the one-line
    choice.

    Example:
        >>> choose_threads(2, apply=False).threads
        2
    """
    _check_count("steps", steps, MAX_BLOCK_STEPS, "the fewest iterations in a timed block")
    _check_count("rounds", rounds, MAX_TIMING_ROUNDS, "the interleaved rounds of timing")
    explicit = check_threads(threads)
    if explicit is not None:
        choice = ThreadChoice(explicit, f"threads={explicit} as asked", usable_cpus())
    else:
        tuner = ThreadTuner(steps=steps, rounds=rounds)
        if step is not None:
            while tuner.measuring:
                tuner.before_step()
                started = time.perf_counter()
                step()
                tuner.after_step(time.perf_counter() - started, 1)
        else:
            tuner.settle_unmeasured()
        choice = tuner.choice
    if apply:
        set_threads(choice.threads)
    if say is not None:
        say(choice.describe())
    return choice


def _check_count(name: str, value: Any, most: int, what: str) -> None:
    if not is_count(value, 1, most):
        raise ConfigError(f"{name}={quote_value(value)}: {what}, a whole number from 1 to {most:,}.")


class ThreadTuner:
    """``threads="auto"`` inside a loop: call :meth:`before_step` and :meth:`after_step` around each real
    iteration; it times the candidate counts on those iterations, settles on one, and checks again when the
    machine changes (the Trainer's CPU loop does this, timing each whole iteration, the batch's fetch
    included; ``choice`` is the current decision).

    Example:
        >>> tuner = ThreadTuner(usable=2, busy=0.0)
        >>> while tuner.measuring:   # short iterations are timed in blocks of BLOCK_S
        ...     tuner.before_step()
        ...     tuner.after_step(0.001 if tuner.upcoming == 1 else 0.002, 8)
        >>> tuner.choice.threads, sorted(tuner.choice.step_s)
        (1, [1, 2])
    """

    def __init__(self, *, steps: int = 2, rounds: int = 3, say: Callable[[str], Any] | None = None,
                 usable: int | None = None, busy: float | None = None,
                 others: Callable[[], float] | None = None, planned_steps: int | None = None,
                 reader: CpuReader | None = None) -> None:
        """``steps``: the fewest iterations in a timed block; ``rounds``: interleaved rounds of one block per
        count, at most; ``usable``, ``busy``: the CPUs to share and the others' use now (default: read);
        ``others``: the others' CPU since its last call (default: :meth:`CpuReader.others`);
        ``planned_steps``: the iterations the run will take (None: unknown, the timing unbounded), of which
        at most :data:`MEASURE_SHARE` go to timing; ``reader``: a :class:`CpuReader` made when the run began,
        so that the first reading of ``busy`` waits only what is left of :data:`READ_S`."""
        _check_count("steps", steps, MAX_BLOCK_STEPS, "the fewest iterations in a timed block")
        _check_count("rounds", rounds, MAX_TIMING_ROUNDS, "the interleaved rounds of timing")
        self.steps, self.rounds, self.say = steps, rounds, say
        self.planned_steps = planned_steps
        self.timed_steps = 0  # iterations run while timing, the warm-ups included, over every check
        self.usable = usable if usable is not None else usable_cpus()
        if others is None:
            try:
                others = CpuReader().others
            except OSError:
                others = None
        self._others = others
        self.changes: list[ThreadChoice] = []
        self._window_started, self._window_samples, self._window_seconds = time.perf_counter(), 0, 0.0
        self._start(busy if busy is not None else recent_busy_cpus(reader=reader), "")

    def _start(self, busy: float, why: str) -> None:
        default = free_cpus(self.usable, busy)
        self.busy = busy
        self._why = why
        self.candidates = thread_candidates(self.usable, default)
        self.default = default
        self._samples: dict[int, list[float]] = {c: [] for c in self.candidates}
        self._block: list[float] = []
        self._block_cap: int | None = None  # a block ends at this many iterations even under BLOCK_S (budget)
        self._dropped: set[int] = set()  # counts found CLEARLY_SLOWER than the default: timed no more
        self._baseline: float | None = None
        self.measuring = len(self.candidates) > 1
        fitted = self._fitted_plan() if self.measuring else None
        if isinstance(fitted, str):
            self._settle(default, fitted)
            return
        if fitted is not None:
            # One block per count per round, each round in another order; the first iteration, at the
            # default, is a warm-up and not timed (allocations, first-call dispatch).
            rounds, self._block_cap = fitted
            self._plan = [c for r in range(rounds) for c in _rotated(self.candidates, r)]
            self._warmup = True
            self.choice = ThreadChoice(default, f"{self._base()}; measuring", self.usable, busy)
            set_threads(default)
        else:
            self._settle(default, "")

    @property
    def budget(self) -> int | None:
        """The most iterations timing may take in this run (None: the planned steps are unknown)."""
        return None if self.planned_steps is None else math.floor(MEASURE_SHARE * self.planned_steps)

    def extend_plan(self, steps: int | None) -> None:
        """Another ``steps`` planned (a Trainer's next ``fit``): the budget grows with them."""
        self.planned_steps = None if steps is None or self.planned_steps is None else self.planned_steps + steps

    def _fitted_plan(self) -> tuple[int, int | None] | str:
        """(rounds, most iterations in a block) that fit the budget left, or why nothing is timed."""
        if self.budget is None:
            return self.rounds, None
        left = self.budget - self.timed_steps
        fewest = min(MIN_ROUNDS, self.rounds)
        needed = 1 + len(self.candidates) * fewest * self.steps
        if left < needed:
            share = f"{MEASURE_SHARE:.0%} of the {self.planned_steps} planned steps"
            if self.timed_steps:
                return f"not measured: the timing already took its {share}"
            return (f"not measured: timing {len(self.candidates)} counts takes {needed} steps, more than "
                    f"{share} (a run of at least {math.ceil(needed / MEASURE_SHARE)} steps is timed)")
        rounds = min(self.rounds, (left - 1) // (len(self.candidates) * self.steps))
        return rounds, (left - 1) // (len(self.candidates) * rounds)

    def _base(self) -> str:
        return f"{self.usable} usable CPU{'s' if self.usable != 1 else ''}, others use {self.busy:.1f} now"

    def _announce(self) -> None:
        self.changes.append(self.choice)
        if self.say is not None:
            self.say(self.choice.describe())

    @property
    def upcoming(self) -> int:
        """The thread count the next iteration runs with (for a runtime whose threads are fixed per session)."""
        if self.measuring:
            return self.default if self._warmup else self._plan[0]
        return self.choice.threads

    def settle_unmeasured(self) -> None:
        """Take the free CPUs' count without timing anything (there is no step to time)."""
        if self.measuring:
            self._settle(self.default, "not measured")

    def pause(self) -> None:
        """Between loops (validation, the end of a run): run at the current choice until the next
        :meth:`before_step`, which goes on timing where it stopped."""
        set_threads(self.choice.threads)

    def before_step(self) -> None:
        """Set torch's thread count for the next iteration."""
        if self.measuring:
            set_threads(self.upcoming)

    def after_step(self, seconds: float, samples: int) -> None:
        """Record one iteration: its wall seconds and how many samples it processed."""
        if self.measuring:
            self.timed_steps += 1
            self._measured(seconds)
            return
        measured = self.choice.step_s.get(self.choice.threads)
        if measured is None or seconds <= OTHER_WORK * measured:  # longer: a checkpoint, validation, ...
            self._window_samples += samples
            self._window_seconds += seconds
        if time.perf_counter() - self._window_started >= WINDOW_S:
            self._end_window()

    def _measured(self, seconds: float) -> None:
        if self._warmup:
            self._warmup = False
            return
        self._block.append(seconds)
        short = sum(self._block) < BLOCK_S and (self._block_cap is None or len(self._block) < self._block_cap)
        if len(self._block) < self.steps or short:
            return
        self._samples[self._plan.pop(0)].append(statistics.median(self._block))
        self._block = []
        active = {c: v for c, v in self._samples.items() if c not in self._dropped}
        rounds = {len(v) for v in active.values()}
        if len(rounds) > 1:
            return  # within a round
        self._drop_slow_counts()
        if len(self._dropped) == len(self.candidates) - 1:
            medians = {c: statistics.median(v) for c, v in self._samples.items()}
            measured = ", ".join(f"{c}: {1e3 * m:.1f} ms" for c, m in medians.items())
            self._settle(self.default, f"iteration {measured}; the other counts {CLEARLY_SLOWER:g}x slower or more: "
                                       "kept the free CPUs' count", medians)
        elif min(rounds) >= min(MIN_ROUNDS, self.rounds):  # enough rounds for a spread
            verdict = judge({c: v for c, v in active.items() if c not in self._dropped}, self.default,
                            final=not self._plan)
            if verdict is not None:
                self._settle(*verdict)

    def _drop_slow_counts(self) -> None:
        """Time no more the counts a round found :data:`CLEARLY_SLOWER` than the default (beside a busy
        neighbour, all cores took 8x the default's iteration: each of their blocks was the timing's cost)."""
        default = statistics.median(self._samples[self.default])
        for count, values in self._samples.items():
            if count != self.default and count not in self._dropped and statistics.median(values) >= CLEARLY_SLOWER * default:
                self._dropped.add(count)
                self._plan = [c for c in self._plan if c != count]

    def _settle(self, threads: int, why: str, medians: dict[int, float] | None = None,
                spread: float | None = None) -> None:
        self.measuring = False
        self._plan = []
        reason = f"{self._why}{self._base()}" + (f"; {why}" if why else "")
        self.choice = ThreadChoice(threads, reason, self.usable, self.busy, dict(medians or {}), spread)
        set_threads(threads)
        self._announce()
        self._window_started, self._window_samples, self._window_seconds = time.perf_counter(), 0, 0.0
        if self._others is not None:
            self._others()  # the next window's neighbours' CPU starts now

    def _end_window(self) -> None:
        busy = self._others() if self._others is not None else self.busy
        samples, seconds = self._window_samples, self._window_seconds
        self._window_started, self._window_samples, self._window_seconds = time.perf_counter(), 0, 0.0
        throughput = samples / seconds if seconds > 0 else None
        if self._baseline is None:
            self._baseline = throughput
        elif throughput is not None and throughput < (1 - RECHECK_FALL) * self._baseline:
            self._start(busy, f"re-checked: throughput fell from {self._baseline:,.0f} to {throughput:,.0f} "
                              "samples/s; ")
            return
        # Judged against the free count, not the reading the choice saw: a choice made at 0.7 busy (1 of 2
        # CPUs) must come back to 2 when the neighbour leaves, though 0.7 -> 0.0 is a small move.
        if all(free_cpus(self.usable, b) != self.default for b in (busy - RECHECK_MARGIN, busy + RECHECK_MARGIN)):
            self._start(busy, f"re-checked: others' CPU went from {self.busy:.1f} to {busy:.1f}; ")


def judge(samples: dict[int, list[float]], default: int, final: bool = True
          ) -> tuple[int, str, dict[int, float], float] | None:
    """The count to keep, why, each count's median and the spread, from each count's timed blocks; None when
    it is not clear yet and another round may tell (never when ``final``).

    Another count is taken only when it is faster than ``default`` beyond the spread (the widest
    interquartile range of the counts' blocks, relative to the median); ``default`` is kept when the
    fastest other count is slower beyond it, within half of it (noise), or, ``final``, anywhere between.

    Example:
        >>> judge({1: [0.9, 0.9], 2: [1.0, 1.0]}, default=2)[:2]
        (1, 'iteration 1: 900.0 ms, 2: 1000.0 ms; 1 faster than the default 2 beyond the spread ±0%')
        >>> judge({1: [0.8, 1.04], 2: [1.0, 1.3]}, default=2, final=False) is None  # 20% within ±26%: unclear
        True
    """
    medians = {c: statistics.median(v) for c, v in samples.items()}
    spread = max(_relative_spread(v) for v in samples.values())
    best = min((c for c in medians if c != default), key=medians.__getitem__)
    measured = ", ".join(f"{c}: {1e3 * m:.1f} ms" for c, m in medians.items())
    gain = 1 - medians[best] / medians[default]
    if gain > spread:
        return best, f"iteration {measured}; {best} faster than the default {default} beyond the spread ±{spread:.0%}", \
            medians, spread
    if final or gain < -spread or abs(gain) <= spread / 2:
        return default, f"iteration {measured}, spread ±{spread:.0%}; kept the free CPUs' count", medians, spread
    return None


def _rotated(items: list[int], shift: int) -> list[int]:
    shift %= len(items)
    return items[shift:] + items[:shift]


def _relative_spread(values: list[float]) -> float:
    """The interquartile range of ``values`` as a share of their median (0 for fewer than 2)."""
    if len(values) < 2:
        return 0.0
    ordered = sorted(values)
    quarter = (len(ordered) - 1) / 4
    low, high = ordered[math.floor(quarter)], ordered[math.ceil(3 * quarter)]
    return (high - low) / statistics.median(ordered)
