"""What a run writes: the modes of kept files, and a full disk (a real 2 MiB tmpfs)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork import Trainer, seed_everything
from torchwork.errors import DiskFullError, TorchworkError
from torchwork.files import atomic_write, write_json
from torchwork.runs.checkpoint import CheckpointManager, verify_checkpoint


@pytest.fixture
def umask_002():
    previous = os.umask(0o002)
    yield 0o664
    os.umask(previous)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_kept_files_get_the_mode_of_a_plain_open(tmp_path, umask_002):
    with open(tmp_path / "plain.txt", "w") as handle:
        handle.write("x")
    write_json(tmp_path / "summary.json", {"a": 1})
    with atomic_write(tmp_path / "report.html", "w") as handle:
        handle.write("<html></html>")
    assert mode(tmp_path / "plain.txt") == umask_002
    assert mode(tmp_path / "summary.json") == umask_002 and mode(tmp_path / "report.html") == umask_002


def tiny_trainer(run_dir: Path, width: int = 8, every: int | None = None) -> tuple[Trainer, list]:
    seed_everything(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 2))
    data = [(torch.randn(4, width), torch.randint(0, 2, (4,))) for _ in range(3)]
    trainer = Trainer(model, torch.optim.AdamW(model.parameters()), nn.CrossEntropyLoss(), device="cpu",
                      run_dir=run_dir, progress=False, tensorboard=False, checkpoint_every_n_steps=every)
    return trainer, data


def test_run_files_and_checkpoints_get_the_mode_of_a_plain_open(tmp_path, umask_002):
    trainer, data = tiny_trainer(tmp_path / "runs")
    trainer.fit(data, data[:1], epochs=1)
    run = trainer.run_path
    for name in ("manifest.json", "metrics.jsonl", "checkpoints/step-000000003.pt",
                 "checkpoints/step-000000003.pt.sha256", "checkpoints/best.pt", "checkpoints/best.json"):
        assert mode(run / name) == umask_002, name


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 2 MiB tmpfs (needs root and a kernel that allows the mount)."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_atomic_write_on_a_full_disk_names_the_path_and_keeps_the_old_file(tiny_disk):
    path = tiny_disk / "summary.json"
    write_json(path, {"old": True})
    with pytest.raises(DiskFullError, match=r"cannot write .*summary\.json.* bytes free"):
        with atomic_write(path) as handle:  # no size given: the write itself hits ENOSPC
            handle.write(b"x" * 3 * 1024 * 1024)
    assert path.read_text().strip().startswith("{") and '"old": true' in path.read_text()
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["summary.json"]  # no temp file left


def test_checkpoint_on_a_full_disk_is_a_torchwork_error_and_loses_nothing(tiny_disk):
    # 3 x 91k floats (weights and AdamW's two moments): about 1.1 MB a checkpoint. The first step checkpoint
    # fits in 2 MiB; the next one does not.
    trainer, data = tiny_trainer(tiny_disk / "runs", width=300, every=1)
    with pytest.raises(TorchworkError) as caught:
        trainer.fit(data, data[:1], epochs=1)
    message = str(caught.value)
    assert isinstance(caught.value, DiskFullError)
    assert "step-000000002.pt" in message and "bytes free" in message and "it needs" in message
    needed, free = (int(part.split()[0].replace(",", "")) for part in
                    (message.split("it needs ")[1], message.split("filesystem has ")[1]))
    assert needed > free
    checkpoints = trainer.run_path / "checkpoints"
    manager = CheckpointManager(checkpoints)
    assert [p.name for p in manager.step_checkpoints()] == ["step-000000001.pt"]
    assert verify_checkpoint(checkpoints / "step-000000001.pt") is None
    assert not [p.name for p in trainer.run_path.rglob("*.tmp")]


def test_a_metrics_line_on_a_full_disk_is_a_disk_full_error(tiny_disk):
    from torchwork.runs.loggers import JsonlLogger

    logger = JsonlLogger(tiny_disk / "metrics.jsonl")
    (tiny_disk / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 8192))  # leave less than a page or two
    with pytest.raises(DiskFullError, match=r"cannot write .*metrics\.jsonl: it needs \d+ bytes"):
        for step in range(1000):
            logger.log({"loss": 0.5, "note": "x" * 100}, step)
    with contextlib.suppress(OSError):
        logger.close()  # a buffered tail may not fit either


def test_leftovers_of_an_interrupted_export_are_removed_and_nothing_else(tmp_path):
    from torchwork.runs.checkpoint import remove_leftovers

    run = tmp_path / "run"
    for folder in (".artifact.export-k2j4_x9a", ".artifact.old-4242-1764590000000000000", "artifact",
                   ".artifact.backup", "checkpoints"):
        (run / folder).mkdir(parents=True)
        (run / folder / "model.onnx").write_bytes(b"onnx")
    removed = remove_leftovers(run)
    assert sorted(p.name for p in removed) == [".artifact.export-k2j4_x9a", ".artifact.old-4242-1764590000000000000"]
    assert sorted(p.name for p in run.iterdir()) == [".artifact.backup", "artifact", "checkpoints"]
    assert all((run / f / "model.onnx").read_bytes() == b"onnx" for f in (".artifact.backup", "artifact"))
