"""engine/checkpoint.py: the Trainer's checkpoint payload, typed, and the file format it keeps."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.engine.checkpoint import TrainerCheckpoint
from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import load_checkpoint

# The entries of a checkpoint file, in the order they are written (the on-disk format: a change here is a
# change of format_version, not a refactoring).
FILE_ENTRIES = ["format_version", "world_size", "per_rank", "model", "optimizer", "scheduler", "scaler", "counters",
                "rng", "epoch_start_rng", "loader_rng", "epoch_totals", "history", "callbacks"]


def _trainer(seed: int = 0) -> tuple[Trainer, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2)
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(4)]
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", progress=False, threads=1,
                      early_stopping="train_loss")
    return trainer, data


def test_the_fields_are_the_file_entries_in_order() -> None:
    fields = [f.name for f in dataclasses.fields(TrainerCheckpoint)]
    assert fields == [*FILE_ENTRIES, "extra"]
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    assert list(trainer.state_dict()) == FILE_ENTRIES


def test_state_dict_and_load_state_dict_round_trip_with_what_a_run_folder_adds(tmp_path: Path) -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    trainer.step(data[0])
    trainer.save(tmp_path / "c.pt")
    state = load_checkpoint(tmp_path / "c.pt")
    state["best_value"], state["run"] = 0.5, "20260101-000000"
    checkpoint = TrainerCheckpoint.from_state_dict(state)
    assert checkpoint.counters["global_step"] == 5 and checkpoint.scheduler is not None
    assert checkpoint.extra == {"best_value": 0.5, "run": "20260101-000000"}
    again = checkpoint.state_dict()
    assert list(again) == list(state)
    assert all(again[name] is state[name] for name in state)  # the same objects: nothing copied or rebuilt


def test_a_checkpoint_without_the_entries_older_versions_lacked_resumes_exactly() -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    state = copy.deepcopy(trainer.state_dict())  # its tensors are the live ones: the step below changes them
    for name in ("world_size", "per_rank", "callbacks", "scaler", "history"):
        del state[name]
    expected = trainer.step(data[1])
    resumed, _ = _trainer(seed=1)
    resumed.load_state_dict(state)
    assert resumed.global_step == 4 and resumed.history == []
    assert torch.equal(resumed.step(data[1]), expected)


def test_a_damaged_field_is_refused_before_anything_is_kept() -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    state = trainer.state_dict()
    state["counters"] = {**state["counters"], "epoch": -1}
    checkpoint = TrainerCheckpoint()
    with pytest.raises(CheckpointError, match=r"checkpoint c\.pt cannot be resumed: counters\['epoch'\] is -1, "
                                              r"not a count \(an integer >= 0\)\."):
        checkpoint.load_state_dict(state, "c.pt")
    assert checkpoint == TrainerCheckpoint()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(CheckpointError, match="given to load_state_dict cannot be resumed"):
        trainer.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
