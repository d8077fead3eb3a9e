"""Wall time of `torchwork env` and `torchwork env check`, and what the snapshot adds to a run's start.

Prints one JSON object. Each command runs in a fresh process (as a user runs it), interleaved with the
baseline `python -c "import torch"` measured in the same rounds; the median of the rounds is reported
(the machine is shared and noisy). Goals: `torchwork env` < 2 s and `env check` < 10 s.

The run-start figure: in a fresh process with torch imported, the first ``compact_snapshot()`` (what
``build_manifest`` now adds to every run manifest) against the whole ``build_manifest`` of a small Trainer,
which includes it.

Run: ``python benchmarks/env_speed.py [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}

COMMANDS = {
    "import_torch": [sys.executable, "-c", "import torch"],
    "env": [sys.executable, "-m", "torchwork.cli", "env"],
    "env_json": [sys.executable, "-m", "torchwork.cli", "env", "--json"],
    "env_check": [sys.executable, "-m", "torchwork.cli", "env", "check"],
}

RUN_START = """
import json, time, torch
from torch import nn
from torchwork import Trainer
from torchwork.runs.manifest import build_manifest
model = nn.Linear(4, 2)
trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                  progress=False)
started = time.perf_counter()
from torchwork.env.report import compact_snapshot
compact_snapshot()
snapshot = time.perf_counter() - started
compact_snapshot.__globals__["installed_distributions"].cache_clear()  # build_manifest takes it afresh
started = time.perf_counter()
build_manifest(trainer, [(torch.zeros(2, 4), torch.zeros(2).long())], None, 1, {})
print(json.dumps({"snapshot_ms": snapshot * 1e3, "build_manifest_ms": (time.perf_counter() - started) * 1e3}))
"""


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command} failed: {done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    starts = []
    for _ in range(args.rounds):
        for name, command in COMMANDS.items():
            samples[name].append(wall(command))
        done = subprocess.run([sys.executable, "-c", RUN_START], capture_output=True, text=True, env=ENV)
        starts.append(json.loads(done.stdout))
    median = {name: round(statistics.median(values), 3) for name, values in samples.items()}
    snapshot_ms = statistics.median(s["snapshot_ms"] for s in starts)
    manifest_ms = statistics.median(s["build_manifest_ms"] for s in starts)
    record({
        "rounds": args.rounds, "cpus": os.cpu_count(),
        "seconds": median,
        "env_goal_2s_met": median["env"] < 2.0, "env_check_goal_10s_met": median["env_check"] < 10.0,
        "env_over_import_torch_s": round(median["env"] - median["import_torch"], 3),
        "env_check_over_import_torch_s": round(median["env_check"] - median["import_torch"], 3),
        "run_start": {"compact_snapshot_ms": round(snapshot_ms, 1), "build_manifest_ms": round(manifest_ms, 1),
                      "snapshot_share_of_build_manifest": round(snapshot_ms / manifest_ms, 3)},
    }, indent=2)


if __name__ == "__main__":
    main()
