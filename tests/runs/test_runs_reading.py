"""What a person reads while a run trains and at its end: validation metrics in the progress lines, why early
stopping stopped, epochs counted from 1, best.pt a hard link (not a second copy) and the run's disk use."""

from __future__ import annotations

import json

import torch
from torch import nn

from torchwork import EarlyStopping, Trainer


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)) for _ in range(3)]


def test_progress_shows_validation_and_why_early_stopping_stopped(tmp_path, capsys):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.0), nn.CrossEntropyLoss(), device="cpu",
                      early_stopping=EarlyStopping("val_loss", patience=2), run_dir=tmp_path, tensorboard=False,
                      progress_every_s=3600, guard=False)
    history = trainer.fit(data(), data()[:1], epochs=10)  # lr 0: val_loss never improves after epoch 1
    err = capsys.readouterr().err
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert f"epoch 1/10 validation  loss {history[0]['val_loss']:.4f}" in err
    assert "epoch 3/10 validation  loss" in err
    assert ("torchwork: stopped after epoch 3 of 10: early stopping: val_loss has not improved on "
            f"{history[0]['val_loss']:.4g} (epoch 1) for 2 epochs (patience 2)") in err
    rows = [json.loads(line) for line in (trainer.run_path / "metrics.jsonl").read_text().splitlines()]
    assert {r["epoch"] for r in rows} == {1, 2, 3}


def test_best_is_a_hard_link_and_the_disk_use_is_stated(tmp_path, capsys):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                      run_dir=tmp_path, tensorboard=False, progress=False, guard=False)
    trainer.fit(data(), data()[:1], epochs=3)
    checkpoints = trainer.run_path / "checkpoints"
    best = checkpoints / "best.pt"
    source = checkpoints / json.loads((checkpoints / "best.json").read_text())["from"]
    assert best.stat().st_ino == source.stat().st_ino and best.stat().st_nlink == 2  # one file, two names
    assert (checkpoints / "best.pt.sha256").read_text().endswith("  best.pt\n")
    from torchwork.runs.checkpoint import load_checkpoint, verify_checkpoint

    assert verify_checkpoint(best) is None and load_checkpoint(best)["counters"]["global_step"] > 0
    err = capsys.readouterr().err
    assert f"torchwork: run {trainer.run_path} takes " in err and "on disk (checkpoints " in err
    # a hard-linked file counts once
    from torchwork.runs.checkpoint import disk_use

    files = {p.stat().st_ino: p.stat().st_size for p in trainer.run_path.rglob("*") if p.is_file()}
    assert disk_use(trainer.run_path) == sum(files.values())


def test_the_run_header_prints_the_lr_without_float_noise_and_onecycles_max_lr(tmp_path, capsys):
    model = nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=6)
    Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", run_dir=tmp_path, progress=False,
            tensorboard=False, guard=False).fit(data(), epochs=2)
    header = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("optimizer"))
    assert "AdamW(lr=0.00012," in header and "max_lr=0.003" in header and "99999" not in header
