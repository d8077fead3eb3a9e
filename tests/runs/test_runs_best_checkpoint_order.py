"""A kill between a run's step checkpoint and its best.pt must not lose best.pt for good: a resume from that
step checkpoint restores the best value, so a later epoch that only equals it would never write best.pt again.
best.pt is a hard link to its step checkpoint, made after it; a resume that finds best.json behind the best
value it restores points best.pt at the checkpoint it resumes from (CheckpointManager.restore_best)."""

from __future__ import annotations

import json

import pytest
import torch

import torchwork.runs.checkpoint as checkpoint
from torchwork.runs.checkpoint import CheckpointManager


class Killed(BaseException):
    pass


def test_a_kill_before_best_pt_is_mended_by_the_resume(tmp_path, monkeypatch) -> None:
    manager = CheckpointManager(tmp_path, monitor="val_f1", mode="max")
    state = {"model": {"w": torch.ones(2)}, "counters": {"global_step": 5}}

    def dies(source, target):
        raise Killed  # the process dies after the step checkpoint, before best.pt points at it

    monkeypatch.setattr(checkpoint, "link_checkpoint", dies)
    with pytest.raises(Killed):
        manager.save(state, 5, {"val_f1": 0.5})
    monkeypatch.undo()
    (step,) = manager.step_checkpoints()
    assert not (tmp_path / "best.pt").exists()

    resumed = CheckpointManager(tmp_path, monitor="val_f1", mode="max")
    resumed.restore_best(0.5, step, 5)  # the value the step checkpoint recorded
    assert (tmp_path / "best.pt").stat().st_ino == step.stat().st_ino or (tmp_path / "best.pt").is_file()
    assert json.loads((tmp_path / "best.json").read_text())["value"] == 0.5


def test_a_resume_whose_best_is_recorded_leaves_best_pt_alone(tmp_path) -> None:
    manager = CheckpointManager(tmp_path, monitor="val_f1", mode="max")
    first = manager.save({"model": {"w": torch.ones(2)}, "counters": {"global_step": 5}}, 5, {"val_f1": 0.7})
    later = manager.save({"model": {"w": torch.zeros(2)}, "counters": {"global_step": 9}}, 9, {"val_f1": 0.6})
    assert first is not None and later is not None
    CheckpointManager(tmp_path, monitor="val_f1", mode="max").restore_best(0.7, later, 9)
    assert json.loads((tmp_path / "best.json").read_text())["step"] == 5  # still the best one


@pytest.mark.parametrize("mode", ["min", "max"])
def test_a_nan_monitored_value_is_never_the_best_even_first(tmp_path, mode, capsys) -> None:
    # as the first value a NaN was the best, and no later value compares better than NaN: best.pt stayed on it
    manager = CheckpointManager(tmp_path, monitor="val_loss", mode=mode)
    manager.save({"model": {"w": torch.ones(2)}, "counters": {"global_step": 4}}, 4, {"val_loss": float("nan")})
    assert manager.best_value is None and not (tmp_path / "best.json").exists()
    manager.save({"model": {"w": torch.zeros(2)}, "counters": {"global_step": 8}}, 8, {"val_loss": 0.5})
    manager.save({"model": {"w": torch.zeros(2)}, "counters": {"global_step": 12}}, 12, {"val_loss": float("inf")})
    assert manager.best_value == 0.5 and json.loads((tmp_path / "best.json").read_text())["step"] == 8
    said = capsys.readouterr().err
    assert said.count("torchwork: val_loss is nan at step 4: a checkpoint of it is kept but it is never the best "
                      "(no best checkpoint yet)") == 1 and said.count("torchwork: ") == 1  # once, not at inf too


def test_a_non_finite_best_handed_to_a_resume_is_no_best(tmp_path) -> None:
    manager = CheckpointManager(tmp_path, monitor="val_loss", mode="min")
    step = manager.save({"model": {"w": torch.ones(2)}, "counters": {"global_step": 4}}, 4, {"val_loss": 0.9})
    assert step is not None
    resumed = CheckpointManager(tmp_path, monitor="val_loss", mode="min")
    resumed.restore_best(float("nan"), step, 4)
    assert resumed.best_value is None and resumed.improves(0.95)
