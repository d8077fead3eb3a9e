"""A kill between a run's step checkpoint and its best.pt must not lose best.pt for good: a resume from that
step checkpoint restores the best value, so a later epoch that only equals it would never write best.pt again.
best.pt and best.json are therefore written before the step checkpoint."""

from __future__ import annotations

import pytest
import torch

import torchwork.runs.checkpoint as checkpoint
from torchwork.runs.checkpoint import CheckpointManager


class Killed(BaseException):
    pass


def test_no_step_checkpoint_is_left_without_its_best(tmp_path, monkeypatch) -> None:
    manager = CheckpointManager(tmp_path, monitor="val_f1", mode="max")
    state = {"model": {"w": torch.ones(2)}, "counters": {"global_step": 5}}
    real, calls = checkpoint.save_checkpoint, []

    def dies_on_the_second_write(data, path):
        calls.append(path.name)
        if len(calls) == 2:
            raise Killed  # the process dies between the two writes
        return real(data, path)

    monkeypatch.setattr(checkpoint, "save_checkpoint", dies_on_the_second_write)
    with pytest.raises(Killed):
        manager.save(state, 5, {"val_f1": 0.5})
    if manager.step_checkpoints():  # what a resume would continue from
        assert (tmp_path / "best.json").is_file() and (tmp_path / "best.pt").is_file()
