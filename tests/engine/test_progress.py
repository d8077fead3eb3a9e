"""Progress where there is no terminal: plain lines at a steady pace and at each epoch's end."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

from torchwork.engine.progress import ProgressBar, format_duration

TRAIN = """
import time, torch
from torch import nn
from torchwork import Trainer

class Slow:  # a step that takes a while, like real training
    def on_step_end(self, trainer, logs):
        time.sleep(0.06)

torch.manual_seed(0)
model = nn.Linear(4, 2)
data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(6)]
trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                  callbacks=[Slow()], log_every_n_steps=1{extra})
trainer.fit(data, epochs=2)
"""
LINE = re.compile(r"^epoch (\d)/2( done)?  step (\d+)/6  [\d,]+ samples/s  loss \d+\.\d{4}  ETA \d+s$")


def train_with_stderr_piped(extra: str = "", env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run([sys.executable, "-c", TRAIN.format(extra=extra)], stderr=subprocess.PIPE,
                          stdout=subprocess.DEVNULL, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr  # no bar redrawn in a log
    return [line for line in done.stderr.splitlines() if line.startswith("epoch ")]


def test_without_a_terminal_training_prints_plain_lines_at_each_epoch_end_and_in_between():
    lines = train_with_stderr_piped(env={"TORCHWORK_PROGRESS_EVERY": "0.05"})
    assert all(LINE.match(line) for line in lines), lines
    done = [LINE.match(line).groups() for line in lines if " done " in line]
    assert [(epoch, step) for epoch, _, step in done] == [("1", "6"), ("2", "6")]
    # every step sleeps longer than the interval, so lines come between epoch ends too
    assert any(" done " not in line for line in lines), lines
    assert lines[-1].endswith("ETA 0s")


def test_the_interval_is_a_trainer_setting():
    lines = train_with_stderr_piped(", progress_every_s=3600")
    assert [line.split("  ")[0] for line in lines] == ["epoch 1/2 done", "epoch 2/2 done"]  # only the epoch ends


def test_progress_false_is_silent():
    assert train_with_stderr_piped(", progress=False") == []


def test_the_loss_is_read_only_when_a_line_is_drawn():
    class Loss:
        reads = 0

        def __float__(self):
            Loss.reads += 1
            return 0.25

    bar = ProgressBar(total=100, stream=io.StringIO(), epoch=0, epochs=1, every_s=3600)
    for _ in range(100):
        bar.update(4, Loss())
    bar.close()
    assert Loss.reads == 1  # the epoch-end line only: no device sync per step


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.4, "59s"), (75, "1m15s"), (3725, "1h02m")])
def test_durations_read_like_a_clock(seconds, text):
    assert format_duration(seconds) == text
