"""What a resume reads of a run folder is read as a bounded regular file (issue 49's principle): a FIFO, a
link to a device or an oversized file in the folder is a clear refusal, never a hang or memory without end.
Each case would hang (FIFO) or read without end (/dev/zero) on the code before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import save_checkpoint, verify_checkpoint
from torchwork.runs.loggers import JsonlLogger
from torchwork.runs.relaunch import resume_plan


def test_a_checkpoint_or_checksum_that_is_a_fifo_or_a_device_is_a_reason_not_a_hang(tmp_path: Path) -> None:
    good = tmp_path / "step-000000001.pt"
    save_checkpoint({"counters": {"global_step": 1}}, good)
    assert verify_checkpoint(good) is None
    fifo = tmp_path / "step-000000002.pt"
    os.mkfifo(fifo)
    (tmp_path / "step-000000002.pt.sha256").write_text("0" * 64 + "  step-000000002.pt\n")
    assert "not readable" in verify_checkpoint(fifo)
    zero = tmp_path / "step-000000003.pt"
    zero.write_bytes(b"x")
    (tmp_path / "step-000000003.pt.sha256").symlink_to("/dev/zero")
    assert "not readable" in verify_checkpoint(zero)


def test_resuming_metrics_that_lead_to_a_device_is_refused_in_one_line(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="cannot be read as the run's metrics"):
        JsonlLogger(metrics, resume_step=3)


def test_an_oversized_manifest_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    run = tmp_path / "20260101T000000Z-000001"
    run.mkdir()
    with (run / "manifest.json").open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: 17 MiB of zeros, over the 16 MiB a manifest may be
    with pytest.raises(CheckpointError, match="not a manifest torchwork wrote"):
        resume_plan(run)
