"""Exact resume after SIGKILL, in real subprocesses, and checkpoint integrity."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("resume_script.py")
STEPS_PER_EPOCH = 10  # 150 samples / batch 16


def run_script(run_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(run_dir), str(out), *extra],
                          capture_output=True, text=True, timeout=300)


def load(out: Path) -> dict:
    return torch.load(out, weights_only=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("uninterrupted")
    done = run_script(root / "runs", root / "final.pt")
    assert done.returncode == 0, done.stderr
    return load(root / "final.pt")


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs after resume"


# Three kill points: just after a mid-epoch checkpoint, between checkpoints, and in a later epoch.
# Kill points are drawn once, from a fixed seed, after the first checkpoint (step 4).
KILL_POINTS = sorted(random.Random(2026).sample(range(5, 3 * STEPS_PER_EPOCH), 3))


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_sigkill_then_resume_is_bit_exact(tmp_path, uninterrupted, kill_at):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    killed = run_script(runs, out, "--kill-at", str(kill_at))
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()
    resumed = run_script(runs, out)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    result = load(out)
    assert_same_weights(result["model"], uninterrupted["model"])
    assert [h["train_loss"] for h in result["history"]] == pytest.approx(
        [h["train_loss"] for h in uninterrupted["history"]], rel=1e-6)
    run_folders = list(runs.iterdir())
    assert len(run_folders) == 1, "resume must continue in the same run folder"
    steps = [json.loads(line)["step"] for line in (run_folders[0] / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == sorted(steps) and len(steps) == len(set(steps)), "no duplicated step lines after resume"


@pytest.mark.slow(reason="training processes killed and resumed from both kinds of checkpoint")
def test_resume_from_end_of_epoch_and_mid_epoch_checkpoints(tmp_path, uninterrupted):
    # --every 100: only end-of-epoch checkpoints; killed in epoch 2 resumes from the end of epoch 1
    runs, out = tmp_path / "a" / "runs", tmp_path / "a" / "final.pt"
    assert run_script(runs, out, "--every", "100", "--kill-at", "15").returncode == -signal.SIGKILL
    resumed = run_script(runs, out, "--every", "100")
    assert "step 10, after epoch 1" in resumed.stderr
    assert_same_weights(load(out)["model"], uninterrupted["model"])
    # --every 4, killed at step 13: resumes mid-epoch from step 12 (epoch 1, batch 2)
    runs, out = tmp_path / "b" / "runs", tmp_path / "b" / "final.pt"
    assert run_script(runs, out, "--kill-at", "13").returncode == -signal.SIGKILL
    resumed = run_script(runs, out)
    assert "step 12, epoch 2, after batch 2" in resumed.stderr
    assert_same_weights(load(out)["model"], uninterrupted["model"])


def test_truncated_newest_checkpoint_falls_back_with_a_message(tmp_path, uninterrupted):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    assert run_script(runs, out, "--kill-at", "14").returncode == -signal.SIGKILL
    checkpoints = sorted((next(runs.iterdir()) / "checkpoints").glob("step-*.pt"))
    newest = checkpoints[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    resumed = run_script(runs, out)
    assert resumed.returncode == 0, resumed.stderr
    assert f"skipping checkpoint {newest.name}" in resumed.stderr
    assert "checksum mismatch" in resumed.stderr
    assert_same_weights(load(out)["model"], uninterrupted["model"])


def test_no_valid_checkpoint_is_a_clear_error(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    assert run_script(runs, out, "--kill-at", "9").returncode == -signal.SIGKILL
    for path in (next(runs.iterdir()) / "checkpoints").glob("step-*.pt"):
        path.write_bytes(b"garbage")
    resumed = run_script(runs, out)
    assert resumed.returncode != 0
    assert "no valid checkpoint" in resumed.stderr


def test_nan_weights_are_never_checkpointed(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    done = run_script(runs, out, "--nan-at", "6", "--epochs", "1")
    assert "refusing to write" in done.stderr and "NaN" in done.stderr
    checkpoints = sorted((next(runs.iterdir()) / "checkpoints").glob("step-*.pt"))
    assert [p.name for p in checkpoints] == ["step-000000004.pt"]


def leftovers(run: Path) -> list[str]:
    """Temp files of unfinished writes, and checksum files without their checkpoint."""
    names = [str(p.relative_to(run)) for p in run.rglob("*.tmp")]
    names += [str(p.relative_to(run)) for p in (run / "checkpoints").glob("*.sha256")
              if not p.with_name(p.name[: -len(".sha256")]).exists()]
    return sorted(names)


@pytest.mark.parametrize(("kill", "left"), [
    (["--kill-in-write", ".step-000000008.pt.*.tmp"], "the checkpoint's temp file"),
    (["--kill-in-write", ".step-000000012.pt.sha256.*.tmp"], "the checksum's temp file"),
    (["--kill-after-unlink", "step-000000004.pt"], "a checksum without its checkpoint (killed mid-pruning)"),
])
def test_sigkill_inside_a_checkpoint_write_leaves_nothing_after_resume(tmp_path, uninterrupted, kill, left):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    killed = run_script(runs, out, *kill)
    assert killed.returncode == -signal.SIGKILL
    (run,) = runs.iterdir()
    before = leftovers(run)
    # what is not torchwork's temp names, or not in this run's folder, must survive the clean-up
    keep = [run / "notes.tmp", run / ".notes.tmp", run / "checkpoints" / "mine.pt.sha256.txt",
            runs / ".step-000000004.pt.abcdefgh.tmp", tmp_path / ".report.html.abcdefgh.tmp"]
    for path in keep:
        path.write_text("the user's")
    resumed = run_script(runs, out)
    assert resumed.returncode == 0, resumed.stderr
    if kill[0] == "--kill-in-write" or before:  # today's pruning order leaves no orphan checksum
        assert before, f"the kill should have left {left}"
        assert "leftover(s) of interrupted writes" in resumed.stderr
    assert [n for n in leftovers(run) if run / n not in keep] == [], f"{left} survived the resume"
    assert all(path.read_text() == "the user's" for path in keep)
    assert_same_weights(load(out)["model"], uninterrupted["model"])
