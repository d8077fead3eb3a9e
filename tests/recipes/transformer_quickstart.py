"""One shortened ``torchwork quickstart --quick`` of the transformer, run once for the whole test run: the
transformer tests read its files and serve its artifact, and the kill-and-resume chain compares its own
killed and resumed run with it (the uninterrupted reference). Built by whichever xdist worker asks first
(tests/shared_builds.py); read it, never change it.

16 tokens, one trained layer on cached features, one thread, fp32: every section (n-gram training, feature
caching, transformer training, export) at the least work that still caches, trains and exports, on one core,
as the other xdist workers have the others. fp32 and the cached strategy are pinned so that a killed run makes
the same choices as this one and their scores compare.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shared_builds import built_once

SETTINGS = ["subset=200", "precision=32", "transformer_strategy=cached", "transformer_train_layers=1",
            "transformer_max_length=16", "threads=1", "verify_rounds=5"]
ENV = {**os.environ, "TORCHWORK_PROGRESS_EVERY": "3600"}


def quickstart_command(runs: Path) -> list[str]:
    return [sys.executable, "-m", "torchwork.cli", "quickstart", "--quick", "--set", f"run_dir={runs}",
            *[part for setting in SETTINGS for part in ("--set", setting)]]


def _run_quickstart(folder: Path) -> None:
    done = subprocess.run(quickstart_command(folder / "runs"), capture_output=True, text=True, timeout=1800,
                          env=ENV)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder / "stdout.txt").write_text(done.stdout)
    (folder / "stderr.txt").write_text(done.stderr)


def transformer_quickstart() -> tuple[str, str, Path]:
    """(stdout, stderr, the run folder) of the shared quickstart run."""
    folder = built_once("transformer-quickstart", _run_quickstart)
    (run,) = [path for path in (folder / "runs").iterdir() if path.is_dir()]
    return (folder / "stdout.txt").read_text(), (folder / "stderr.txt").read_text(), run
