"""Ctrl-C (a real SIGINT) during `torchwork train`: one line saying where it stopped and how to continue,
exit status 130, and the checkpoint of that step written."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from torchwork.runs.checkpoint import verify_checkpoint


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_during_train_checkpoints_and_prints_one_line(tmp_path):
    runs = tmp_path / "runs"
    settings = [f"run_dir={runs}", "subset=200", "epochs=100", "patience=1000", "batch_size=32", "precision=32",
                "threads=1", "export_formats=onnx", "quantize=false"]
    process = subprocess.Popen([sys.executable, "-m", "torchwork.cli", "train", "sentiment",
                                *[part for s in settings for part in ("--set", s)]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               # as from a terminal: a shell's background job (nohup, &) inherits SIGINT ignored
                               preexec_fn=_sigint_as_at_a_terminal)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if len(list(runs.glob("*/checkpoints/step-*.pt.sha256"))) >= 2:  # two epochs trained
            process.send_signal(signal.SIGINT)
            break
        time.sleep(0.05)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    found = re.fullmatch(r"torchwork: interrupted at step (\d+); continue with: torchwork resume (\S+)", last)
    assert found, last
    step, run = int(found.group(1)), Path(found.group(2))
    assert run.parent == runs and step >= 14
    checkpoint = run / "checkpoints" / f"step-{step:09d}.pt"
    assert verify_checkpoint(checkpoint) is None
    assert torch.load(checkpoint, weights_only=True)["counters"]["global_step"] == step
    assert not (run / "summary.json").exists()
