"""The Trainer's grouped settings (and the flat keywords they replace), and save/load for own loops."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.engine.options import DistributedOptions, EvaluationOptions, LoggingOptions, StepOptions
from torchwork.errors import CheckpointError, ConfigError
from torchwork.runs.options import RunOptions


def _batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(n)]


def _trainer(**options) -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5)
    if "logging" not in options:
        options["progress"] = False
    return Trainer(model, optimizer, nn.MSELoss(), scheduler, device="cpu", **options)


def test_the_constructor_has_at_most_15_parameters() -> None:
    assert len(inspect.signature(Trainer.__init__).parameters) - 1 <= 15  # self aside


def test_groups_and_flat_keywords_mean_the_same() -> None:
    grouped = _trainer(step=StepOptions(accumulate=2, clip_grad_norm=1.0),
                       logging=LoggingOptions(log_every_n_steps=7, progress=False), run=RunOptions(keep_checkpoints=2),
                       evaluation=EvaluationOptions(early_stopping="val_loss"),
                       distributed=DistributedOptions(enabled=False))
    flat = _trainer(accumulate=2, clip_grad_norm=1.0, log_every_n_steps=7, keep_checkpoints=2,
                    early_stopping="val_loss", distributed=False)
    for t in (grouped, flat):
        assert (t.accumulate, t.clip_grad_norm, t.log_every_n_steps, t.keep_checkpoints) == (2, 1.0, 7, 2)
        assert t.checkpoint_monitor == ("val_loss", "min") and t.guard.check_every == 7
    assert grouped.options["step"] == flat.options["step"]
    losses = []
    for t in (grouped, flat):
        torch.manual_seed(1)  # the same dropout masks for both
        losses.append([float(t.step(*_batches(2, seed))) for seed in range(3)])
    assert losses[0] == losses[1]


def test_a_setting_given_twice_or_unknown_is_refused() -> None:
    with pytest.raises(ConfigError, match="accumulate= and step= both given"):
        _trainer(step=StepOptions(), accumulate=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'acumulate'"):
        _trainer(acumulate=2)
    with pytest.raises(ConfigError, match="log_every_n_steps=0"):
        LoggingOptions(log_every_n_steps=0)


def test_save_and_load_continue_an_own_loop_exactly(tmp_path) -> None:
    trainer = _trainer()
    for batch in _batches(3):
        trainer.step(batch)
    path = tmp_path / "own.pt"
    trainer.save(path)
    assert (tmp_path / "own.pt.sha256").exists()
    later = _batches(4, seed=1)
    expected = [float(trainer.step(batch)) for batch in later]

    again = _trainer()
    again.load(path)
    assert again.global_step == 3 and again.scheduler.last_epoch == 3
    assert [float(again.step(batch)) for batch in later] == expected  # dropout's RNG stream included
    for a, b in zip(trainer.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


def test_save_writes_fits_format_both_ways(tmp_path) -> None:
    trainer = _trainer(run_dir=tmp_path / "runs")
    trainer.fit(_batches(4), epochs=1)
    checkpoint = sorted((trainer.run_path / "checkpoints").glob("step-*.pt"))[-1]
    loaded = _trainer()
    loaded.load(checkpoint)  # fit's checkpoint, read by load
    assert loaded.global_step == 4 and loaded.epoch == 1
    loaded.save(tmp_path / "mine.pt")
    resumed = _trainer()
    history = resumed.fit(_batches(4), epochs=2, resume=tmp_path / "mine.pt")  # save's file, read by fit
    assert [h["epoch"] for h in history] == [1, 2] and resumed.global_step == 8


def test_load_refuses_a_damaged_file(tmp_path) -> None:
    trainer = _trainer()
    trainer.step(_batches(1)[0])
    trainer.save(tmp_path / "own.pt")
    (tmp_path / "own.pt").write_bytes((tmp_path / "own.pt").read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        _trainer().load(tmp_path / "own.pt")
