"""The doctor's slowdown on real code: the correct scripts of tests/doctor/real/correct/, plain vs doctor.

Prints one JSON object. Each script runs in this process (torch imported once), as ``python SCRIPT`` would
run it (``runpy``, ``__main__``, its stdout discarded), plain and under ``torchwork doctor``'s
``run_script`` (every check on), alternating, after one warm-up run of each; each variant keeps its
fastest of ``--repeats`` runs. Times are CPU seconds (process_time) on 1 thread (the machine is shared and
noisy). Goal (issue 21): median slowdown <= 3x.

Run: ``python benchmarks/doctor_real.py [--repeats 3] [--scripts NAME ...]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import runpy
import statistics
import sys
import time
from pathlib import Path

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

from torchwork.doctor.runner import run_script

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "doctor" / "real" / "correct"


def plain(script: Path) -> float:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv, sys.path = [str(script)], [str(script.parent), *sys.path]
    torch.manual_seed(0)
    started = time.process_time()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    return time.process_time() - started


def doctored(script: Path) -> float:
    started = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        result = run_script(script)
    elapsed = time.process_time() - started
    if result.findings or result.internal_errors or result.script_exit:
        raise SystemExit(f"{script.name}: expected a clean run, got {result.to_json()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scripts", nargs="*", help="script names (default: every correct script)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scripts = [p for p in sorted(CORPUS.glob("*.py")) if not args.scripts or p.stem in args.scripts]
    figures: dict[str, dict[str, float]] = {}
    for script in scripts:
        plain(script), doctored(script)  # warm-up: imports, first-call caches
        bare, under = [], []
        for _ in range(args.repeats):
            bare.append(plain(script))
            under.append(doctored(script))
        figures[script.stem] = {"plain_s": round(min(bare), 4), "doctor_s": round(min(under), 4),
                                "ratio": round(min(under) / min(bare), 2)}
        print(f"{script.stem}: {figures[script.stem]}", file=sys.stderr)
    ratios = [f["ratio"] for f in figures.values()]
    median = statistics.median(ratios)
    record({"scripts": figures, "median_ratio": round(median, 2), "max_ratio": max(ratios),
                      "goal_median_ratio": 3.0, "met": median <= 3.0, "repeats": args.repeats,
                      "threads": 1, "cpu": os.cpu_count()}, indent=2)


if __name__ == "__main__":
    main()
