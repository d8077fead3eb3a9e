"""threads="auto": fewer threads than cores beside a busy neighbour (real spinning processes, bounded in
time), a re-check when throughput falls, and every explicit count honoured."""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork import threads as threads_module
from torchwork.errors import ConfigError
from torchwork.threads import BLOCK_S, ThreadTuner, busy_cpus, choose_threads, usable_cpus

SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def spinning_neighbours(count: int, seconds: float = 60.0) -> Iterator[None]:
    """``count`` processes that each keep a CPU busy, for at most ``seconds`` (and stopped on exit)."""
    processes = [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)]) for _ in range(count)]
    try:
        time.sleep(0.5)  # let them start spinning
        # A reading this process took in the last second (an earlier test's Trainer) is of a machine without
        # them: CI's random order once handed it to the next choice (others use 0.1 beside 2 spinning CPUs).
        threads_module._recent = None
        yield
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait(timeout=10)


def _data(batches: int = 14) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(128, 256, generator=generator), torch.randint(0, 4, (128,), generator=generator))
            for _ in range(batches)]


def _trainer(**keywords) -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 4))
    return Trainer(model, torch.optim.AdamW(model.parameters()), nn.CrossEntropyLoss(), device="cpu",
                   progress=False, guard=False, **keywords)


needs_two_cpus = pytest.mark.skipif(usable_cpus() < 2, reason="needs 2 usable CPUs to choose fewer")


@needs_two_cpus
def test_beside_spinning_neighbours_auto_picks_fewer_threads_than_cores() -> None:
    cpus = usable_cpus()
    with spinning_neighbours(cpus):
        assert busy_cpus(0.3) >= cpus / 2  # the neighbours are seen
        trainer = _trainer()
        trainer.fit(_data(), epochs=1)
        choice = trainer.thread_choice
    assert choice is not None and choice.threads < cpus, choice
    assert torch.get_num_threads() == choice.threads
    assert "others use" in choice.reason


@needs_two_cpus
def test_choose_threads_with_a_step_measures_beside_a_neighbour() -> None:
    cpus = usable_cpus()
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    with spinning_neighbours(cpus):
        choice = choose_threads("auto", lambda: [a @ b for _ in range(8)], apply=False)
    assert choice.busy >= cpus / 2, choice  # the neighbours are seen
    fewer = min(choice.step_s, default=None)
    if fewer is not None:  # measured (the step was long enough): both counts were timed
        assert set(choice.step_s) == {fewer, cpus} and fewer < cpus, choice
    # All CPUs only on the clock: they beat the free CPUs' count (the default) beyond the measured spread. With
    # the neighbours in this test's own session that can happen (17.3 ms on 1 thread, 10.2 ms on 2, spread ±38%,
    # seen once in make test), so the test holds the rule, not one outcome of the scheduler.
    if choice.threads == cpus:
        assert fewer is not None, choice  # never without measuring
        assert f"faster than the default {fewer} beyond the spread" in choice.reason, choice
        assert choice.step_s[cpus] < choice.step_s[fewer] * (1 - choice.spread), choice


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_an_explicit_thread_count_is_honoured_busy_or_not(threads: int) -> None:
    with spinning_neighbours(1, seconds=30):
        trainer = _trainer(threads=threads)
        trainer.fit(_data(4), epochs=1)
    assert torch.get_num_threads() == threads
    assert trainer.thread_choice is not None and trainer.thread_choice.threads == threads
    assert choose_threads(threads).threads == threads == torch.get_num_threads()


def test_omp_num_threads_counts_as_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    trainer = _trainer()
    trainer.fit(_data(2), epochs=1)
    assert torch.get_num_threads() == 3 and trainer.thread_choice.reason == "OMP_NUM_THREADS as set"


@pytest.mark.parametrize("bad", [-1, 1.5, "many", True])
def test_a_bad_thread_setting_is_refused_before_any_work(bad: object) -> None:
    with pytest.raises(ConfigError, match="threads="):
        _trainer(threads=bad)
    with pytest.raises(ConfigError, match="threads="):
        choose_threads(bad)  # type: ignore[arg-type]


def _settle(tuner: ThreadTuner, seconds: Callable[[int], float], samples: int = 32) -> int:
    """Feed ``tuner`` iterations of ``seconds(threads)`` until it chooses; the iterations it took."""
    fed = 0
    while tuner.measuring:
        tuner.before_step()
        tuner.after_step(seconds(torch.get_num_threads()), samples)
        fed += 1
    return fed


def test_a_quiet_machine_times_the_counts_and_keeps_one_thread_when_it_is_faster_beyond_the_spread() -> None:
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: 0.0)
    assert tuner.measuring and tuner.candidates == [1, 2] and tuner.upcoming == 2  # the default warms up
    fed = _settle(tuner, lambda threads: 0.0045 if threads == 1 else 0.006)
    assert tuner.choice.threads == 1 == torch.get_num_threads()
    assert tuner.choice.step_s == {1: 0.0045, 2: 0.006} and tuner.choice.spread == 0.0
    assert "1 faster than the default 2" in tuner.choice.reason
    # short iterations are timed in bulk, each block at least BLOCK_S long; the answer is clear beyond the
    # spread after 2 rounds of a block per count, so the third is not timed
    assert fed == tuner.timed_steps == 1 + 2 * (math.ceil(BLOCK_S / 0.0045) + math.ceil(BLOCK_S / 0.006))


def test_the_default_is_kept_unless_another_count_wins_by_more_than_the_spread() -> None:
    # one iteration per block (each is longer than BLOCK_S): the warm-up, then rounds [1, 2], [2, 1], [1, 2]
    noise = iter([1.0, 1.0, 1.0, 1.3, 1.3, 1.0, 1.0])  # the second round 30% slower for both counts
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: 0.0, steps=1)
    # 1 thread 20% faster: after 2 rounds within the spread (±26%) but beyond half of it, so a third round
    fed = _settle(tuner, lambda threads: 0.1 * next(noise) * (0.8 if threads == 1 else 1.0))
    assert tuner.choice.threads == 2 and "kept the free CPUs' count" in tuner.choice.reason
    assert tuner.choice.spread == pytest.approx(0.3) and fed == 7


@pytest.mark.parametrize("one_thread,kept", [(1.0, "alike: noise"), (1.5, "the default faster beyond the spread")])
def test_the_timing_stops_after_two_rounds_when_the_counts_are_alike_or_the_default_wins(one_thread, kept) -> None:
    noise = iter([1.0, 1.0, 1.0, 1.02, 1.02])  # the warm-up, then rounds [1, 2], [2, 1]: a 2% spread
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: 0.0, steps=1)
    fed = _settle(tuner, lambda threads: 0.06 * next(noise) * (one_thread if threads == 1 else 1.0))
    assert fed == 5 and tuner.choice.threads == 2, kept  # the third round is not timed
    assert "kept the free CPUs' count" in tuner.choice.reason


def test_a_count_twice_as_slow_as_the_default_in_the_first_round_is_timed_no_more() -> None:
    """Beside a busy neighbour all cores took 8x the default's iteration: each of its blocks was the cost."""
    tuner = ThreadTuner(usable=2, busy=1.0, others=lambda: 0.0)  # the default: 1 thread
    fed = _settle(tuner, lambda threads: 0.03 if threads == 1 else 0.24)
    assert fed == 1 + 2 + 2 and tuner.choice.threads == 1  # the warm-up and one round of 2-iteration blocks
    assert "the other counts 2x slower or more: kept the free CPUs' count" in tuner.choice.reason


@pytest.mark.parametrize("seconds", [0.001, 0.2], ids=["short-steps", "long-steps"])
@pytest.mark.parametrize("planned", [180, 500, 5000])
def test_timing_takes_at_most_5_percent_of_the_planned_steps(seconds: float, planned: int) -> None:
    """Issue 49, item 11: the candidates' timing filled most of a short run (0.617 s a step against 0.369 s
    with threads=1). Short steps are no longer timed in BLOCK_S blocks past the budget."""
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: 0.0, planned_steps=planned)
    fed = _settle(tuner, lambda threads: seconds * (0.85 if threads == 1 else 1.0))
    assert fed == tuner.timed_steps <= planned // 20 == tuner.budget  # within 5% of the planned steps
    assert tuner.choice.threads == 1 and set(tuner.choice.step_s) == {1, 2}  # measured all the same


def test_a_10_step_run_times_nothing_and_says_why() -> None:
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: 0.0, planned_steps=10)
    assert not tuner.measuring and tuner.timed_steps == 0 and tuner.choice.step_s == {}
    assert tuner.choice.threads == 2 == tuner.default  # the free CPUs' count, the safe default
    assert ("not measured: timing 2 counts takes 9 steps, more than 5% of the 10 planned steps (a run of at "
            "least 180 steps is timed)") in tuner.choice.reason


def test_a_re_check_after_the_budget_is_spent_takes_the_free_count_untimed() -> None:
    readings = iter([0.0, 0.0, 1.6])
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: next(readings, 1.6), planned_steps=200)  # 10 to time
    _settle(tuner, lambda threads: 0.06)
    assert tuner.choice.threads == 2 and tuner.timed_steps == 9
    started = time.perf_counter()
    while len(tuner.changes) < 2 and time.perf_counter() - started < 5.0:  # two windows: the neighbour starts
        tuner.after_step(0.002, 32)
        time.sleep(0.05)
    assert not tuner.measuring and tuner.choice.threads == 1 and tuner.timed_steps == 9
    assert "others' CPU went from 0.0 to 1.6" in tuner.choice.reason
    assert "not measured: the timing already took its 5% of the 200 planned steps" in tuner.choice.reason


def test_a_short_trainer_run_under_auto_times_no_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("torchwork.engine.threads.usable_cpus", lambda: 2)  # two counts to time on any machine
    trainer = _trainer()
    trainer.fit(_data(10), epochs=1)
    choice = trainer.thread_choice
    assert choice is not None and choice.step_s == {} and "not measured: timing 2 counts" in choice.reason
    tuner = trainer.cpu_threads.tuner
    assert tuner is not None and tuner.timed_steps == 0


def test_without_a_step_to_time_the_free_cpus_count_is_taken() -> None:
    choice = choose_threads("auto", apply=False)
    assert 1 <= choice.threads <= usable_cpus() and choice.step_s == {}
    if usable_cpus() > 1:
        assert "not measured" in choice.reason


def test_a_throughput_fall_of_more_than_a_third_starts_a_re_check() -> None:
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: 0.0)
    _settle(tuner, lambda threads: 0.010 if threads == 2 else 0.020)  # quiet: two threads twice as fast
    assert not tuner.measuring and tuner.choice.threads == 2

    def window(step_s: float) -> None:
        started = time.perf_counter()
        while time.perf_counter() - started < 2.1:  # one window of WINDOW_S
            tuner.after_step(step_s, 32)
            time.sleep(0.05)

    window(0.010)  # the baseline: 3,200 samples/s
    window(0.012)  # a sixth slower: no re-check
    assert len(tuner.changes) == 1
    window(0.150)  # over OTHER_WORK times the measured iteration: other work (validation), left out
    assert len(tuner.changes) == 1
    window(0.020)  # half the throughput: re-checked, the counts timed again
    assert tuner.measuring
    _settle(tuner, lambda threads: 0.020)
    assert len(tuner.changes) == 2
    assert re.match(r"re-checked: throughput fell from 3,200 to 1,[5-7]\d\d samples/s", tuner.changes[-1].reason)


def _windows_until_measuring(tuner: ThreadTuner, seconds: float = 5.0) -> None:
    started = time.perf_counter()
    while not tuner.measuring and time.perf_counter() - started < seconds:  # two windows
        tuner.after_step(0.002, 32)
        time.sleep(0.05)


def test_a_neighbour_starting_mid_run_starts_a_re_check() -> None:
    readings = iter([0.0, 0.0, 1.6])
    tuner = ThreadTuner(usable=2, busy=0.0, others=lambda: next(readings, 1.6))
    _settle(tuner, lambda threads: 0.002)  # alike: the default, 2, is kept
    assert tuner.choice.threads == 2
    _windows_until_measuring(tuner)
    assert tuner.measuring and tuner.candidates == [1, 2] and tuner.default == 1
    _settle(tuner, lambda threads: 0.002)
    assert tuner.choice.threads == 1 and "others' CPU went from 0.0 to 1.6" in tuner.choice.reason


def test_a_neighbour_leaving_mid_run_gives_the_cores_back_though_the_reading_moved_little() -> None:
    readings = iter([0.7, 0.7, 0.0])  # chosen at 0.7 busy: 1 of 2 CPUs; then the neighbour leaves
    tuner = ThreadTuner(usable=2, busy=0.7, others=lambda: next(readings, 0.0))
    _settle(tuner, lambda threads: 0.002 if threads == 2 else 0.001)  # busy: one thread faster
    assert tuner.choice.threads == 1
    _windows_until_measuring(tuner)
    assert tuner.measuring and tuner.default == 2
    _settle(tuner, lambda threads: 0.001 if threads == 2 else 0.002)
    assert tuner.choice.threads == 2 and "others' CPU went from 0.7 to 0.0" in tuner.choice.reason


def test_a_reading_near_the_boundary_does_not_flip_the_choice() -> None:
    tuner = ThreadTuner(usable=2, busy=0.7, others=lambda: 0.45)  # 0.45 rounds to 2 free, but 0.7 to 1
    _settle(tuner, lambda threads: 0.002 if threads == 2 else 0.001)
    _windows_until_measuring(tuner, seconds=4.5)
    assert not tuner.measuring and len(tuner.changes) == 1


@pytest.mark.parametrize("prelude,environment,expected", [
    ("", {}, "True PASSIVE"),
    ("", {"OMP_WAIT_POLICY": "ACTIVE"}, "False ACTIVE"),  # the user's policy stays
    ("import torch\n", {}, "False None"),  # too late: libgomp read the environment when torch loaded
])
def test_passive_waiting_is_set_before_torch_loads_unless_the_user_chose(prelude: str, environment: dict[str, str],
                                                                        expected: str) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | environment
    code = (f"{prelude}import os\nfrom torchwork.threads import passive_waiting\n"
            "print(passive_waiting(), os.environ.get('OMP_WAIT_POLICY'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=120)
    assert done.stdout.split() == expected.split()


@pytest.mark.parametrize(("settings", "message"), [
    ({"rounds": 10**5000}, r"rounds=<an integer of 5001 digits or so>: the interleaved rounds of timing, a whole "
                           r"number from 1 to 1,000\."),  # it built a plan of that many rounds: it never returned
    ({"rounds": 0}, r"rounds=0: the interleaved rounds"),  # silently 1 before
    ({"steps": 0}, r"steps=0: the fewest iterations in a timed block"),
    ({"steps": 2.5}, r"steps=2\.5: the fewest iterations"),
    ({"steps": True}, r"steps=True"),
], ids=["huge-rounds", "no-rounds", "no-steps", "fraction", "bool"])
def test_timing_rounds_and_block_steps_are_counts_checked_before_any_timing(settings, message) -> None:

    calls = []
    for threads in ("auto", 2):  # checked whether or not anything is timed
        with pytest.raises(ConfigError, match=message):
            choose_threads(threads, step=lambda: calls.append(1), apply=False, **settings)
    with pytest.raises(ConfigError, match=message):
        ThreadTuner(usable=2, busy=0.0, **settings)
    assert not calls
