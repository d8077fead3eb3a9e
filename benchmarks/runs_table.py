"""`torchwork runs ls` over 1,000 run folders, and what the data fingerprint adds to a run's start.

Prints one JSON object.

1. The table: one real run (a small Trainer, in this process) gives a real manifest and metrics file; they
   are copied into 1,000 run folders with varied seeds, settings, states (finished, killed, resumed,
   pruned), nested runs and a tuning study. `torchwork runs ls DIR` then runs in a fresh process (as a user
   runs it; Python's start-up included), `--rounds` times, interleaved with `python -c pass`; medians are
   reported. Goal: under 2 s on the 2-core machine.
2. The fingerprint: `record_splits` on the CrowdFlower tweets (train, validation and test, 36k rows after
   cleaning), median of `--rounds`, against the wall time of the n-gram quickstart on the full data measured
   here (`torchwork quickstart --model ngram`, its `seconds` in summary.json), unless
   `--quickstart-seconds` gives one. Goal: under 1% of the quickstart.

Run: ``python benchmarks/runs_table.py [--rounds 5] [--folders 1000] [--quickstart-seconds S]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}
sys.path.insert(0, str(SRC))


def real_run(root: Path) -> Path:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from torchwork import Trainer, seed_everything

    seed_everything(0)
    x = torch.randn(256, 8)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(), device="cpu",
                      run_dir=root, progress=False, tensorboard=False, config={"lr": 1e-2, "epochs": 12})
    trainer.fit(DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True),
                DataLoader(TensorDataset(x[:64], y[:64]), batch_size=64), epochs=12)
    assert trainer.run_path is not None
    return trainer.run_path


def make_folders(template: Path, root: Path, count: int) -> None:
    manifest = json.loads((template / "manifest.json").read_text())
    metrics = (template / "metrics.jsonl").read_text()
    best = (template / "checkpoints" / "best.json").read_text()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: the "killed" runs name it
    for index in range(count):
        if index % 50 == 7:  # a tuning study's trials
            folder = root / "tune" / "sweep" / "trials" / str(index) / f"20260101T{index:06d}Z-{index:06x}"
        elif index % 10 == 3:  # nested inside the previous run, as the quickstart's transformer run is
            folder = root / f"20260101T{index - 1:06d}Z-{index - 1:06x}" / "transformer" / f"n{index:06x}"
        else:
            folder = root / f"20260101T{index:06d}Z-{index:06x}"
        (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
        m = dict(manifest, seed=index % 5, config={"lr": 10 ** -(1 + index % 3), "epochs": 12})
        state = ["finished", "finished", "killed", "pruned", "resumed"][index % 5]
        if state == "killed":
            m["state"], m["process"] = "running", {"pid": dead.pid, "host": manifest["process"]["host"]}
            m.pop("ended", None)
            m["monitor"] = {"metric": "val_loss", "mode": "min"}
        elif state == "resumed":
            m["resumes"] = [{"at": m["started"], "from": "step-00000008.pt", "step": 8}]
        else:
            m["state"] = state
        (folder / "manifest.json").write_text(json.dumps(m, indent=1))
        (folder / "metrics.jsonl").write_text(metrics)
        (folder / "checkpoints" / "best.json").write_text(best)


def median_seconds(command: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, env=ENV, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def fingerprint_seconds(rounds: int) -> tuple[float, int]:
    from torchwork.data import load_dataset
    from torchwork.runs.fingerprint import record_splits

    tweets = load_dataset("tweets")
    splits = {"train": tweets.train, "validation": tweets.validation, "test": tweets.test}
    times = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            started = time.perf_counter()
            record_splits(Path(folder), splits)
            times.append(time.perf_counter() - started)
    return statistics.median(times), sum(len(s) for s in splits.values())


def quickstart_seconds() -> tuple[float, float]:
    """The n-gram quickstart's wall time, and the fingerprinting time its own manifest recorded."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "torchwork.cli", "quickstart", "--model", "ngram", "--set",
                        f"run_dir={folder}"], env=ENV, check=True, capture_output=True)
        (summary,) = Path(folder).glob("*/summary.json")
        manifest = json.loads((summary.parent / "manifest.json").read_text())
        return float(json.loads(summary.read_text())["seconds"]), float(manifest["fingerprint_seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--folders", type=int, default=1000)
    parser.add_argument("--quickstart-seconds", type=float, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="runs-table-"))
    try:
        template = real_run(work / "template")
        make_folders(template, work / "runs", args.folders)
        ls = [sys.executable, "-m", "torchwork.cli", "runs", "ls", str(work / "runs")]
        listed = subprocess.run(ls, env=ENV, check=True, capture_output=True, text=True).stdout
        rows = sum(1 for line in listed.splitlines() if line.startswith(("2026", "  tune")))
        nothing, ls_s = [], []
        for _ in range(args.rounds):  # interleaved: machine noise hits both alike
            nothing.append(median_seconds([sys.executable, "-c", "pass"], 1))
            ls_s.append(median_seconds(ls, 1))
        ls_json = median_seconds([*ls, "--json"], args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fingerprint_s, rows_hashed = fingerprint_seconds(args.rounds)
    quick_s, in_run_s = (args.quickstart_seconds, None) if args.quickstart_seconds is not None \
        else quickstart_seconds()
    print(json.dumps({
        "folders": args.folders, "rows_listed": rows, "rounds": args.rounds,
        "runs_ls_s": round(statistics.median(ls_s), 3), "runs_ls_json_s": round(ls_json, 3),
        "python_start_s": round(statistics.median(nothing), 3),
        "runs_ls_spread_s": round(max(ls_s) - min(ls_s), 3),
        "fingerprint_rows": rows_hashed, "fingerprint_s": round(fingerprint_s, 4),
        "quickstart_ngram_s": quick_s, "quickstart_given": args.quickstart_seconds is not None,
        "fingerprint_share_of_quickstart": round(fingerprint_s / quick_s, 5),
        "fingerprint_in_quickstart_s": in_run_s,  # as that run's manifest recorded it (fsyncs included)
        "fingerprint_in_quickstart_share": round(in_run_s / quick_s, 5) if in_run_s is not None else None,
    }))


if __name__ == "__main__":
    main()
