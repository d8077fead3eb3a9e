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
        if len(list(runs.glob("*/checkpoints/step-*.pt"))) >= 2:  # two epochs trained
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


OWN_SCRIPT = '''
import atexit, sys, time, torch
from torch import nn
from torchwork import Trainer
atexit.register(lambda: open(sys.argv[2], "w").write("flushed"))
torch.set_num_threads(1)
x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
data = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8)]
class Slow:
    def on_step_end(self, trainer, logs):
        time.sleep(0.01)
model = nn.Linear(6, 3)
Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu", threads=1,
        run_dir=sys.argv[1], progress=False, tensorboard=False, guard=False, callbacks=[Slow()]).fit(data, epochs=10_000)
'''


def test_sigint_in_your_own_script_ends_it_as_ctrl_c_ends_python(tmp_path):
    """`python train.py`, not the torchwork command: CPython exits by SIGINT (130) only for KeyboardInterrupt
    itself, so the Trainer's subclass used to end in a traceback and status 1."""
    script, runs, flushed = tmp_path / "train.py", tmp_path / "runs", tmp_path / "flushed"
    script.write_text(OWN_SCRIPT)
    process = subprocess.Popen([sys.executable, str(script), str(runs), str(flushed)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_at_a_terminal)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if list(runs.glob("*/checkpoints/step-*.pt")):
            process.send_signal(signal.SIGINT)
            break
        time.sleep(0.05)
    out, err = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGINT, err[-3000:]  # a shell shows 130
    assert "Traceback" not in err
    assert re.fullmatch(r"torchwork: interrupted at step \d+; continue with: torchwork resume \S+",
                        err.strip().splitlines()[-1])
    assert flushed.read_text() == "flushed"  # the script's atexit functions ran
