"""engine/threads.py: the Trainer's thread bookkeeping, trainer.cpu_threads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from engine_helpers import batches, small_trainer

from torchwork.distributed.env import World
from torchwork.engine.threads import StepThreads
from torchwork.threads import ThreadChoice

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _threads_put_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def test_a_count_asked_for_is_set_at_once_and_nothing_replaces_it() -> None:
    threads = StepThreads(1, CPU, World())
    assert torch.get_num_threads() == 1 and not threads.auto
    threads.keep_recorded(2)
    threads.keep(ThreadChoice(2, "another", 2))
    assert torch.get_num_threads() == 1 and threads.choice is not None and threads.choice.threads == 1


def test_keep_ends_the_tuning_with_the_count_given_and_says_it() -> None:
    said: list[str] = []
    threads = StepThreads("auto", CPU, World(), said.append)
    assert threads.auto and threads.choice is None
    threads.keep_recorded(1)
    assert not threads.auto and threads.tuner is None and torch.get_num_threads() == 1
    assert threads.choice is not None and threads.choice.reason.startswith("recorded by the run being resumed")
    assert len(said) == 1 and "1" in said[0]


def test_off_the_cpu_auto_leaves_the_count_alone() -> None:
    threads = StepThreads("auto", torch.device("meta"), World())
    threads.before_step(10, 0)
    assert not threads.auto and threads.tuner is None and threads.choice is None


def test_a_trainer_under_auto_tunes_on_its_steps_and_pauses_after_the_epoch() -> None:
    trainer = small_trainer(threads="auto")
    trainer.fit(batches(4), epochs=1)
    assert trainer.cpu_threads.tuner is not None and trainer.thread_choice is trainer.cpu_threads.choice
