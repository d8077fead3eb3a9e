"""``torchwork fit PHOTOS/`` on Fashion-MNIST's 60,000 training images written as a PNG folder (one
sub-folder per class; the splits are planned 80/10/10 with near copies grouped): file to served model.

Prints one JSON object (and logs it in RESULTS.md):

- ``images``: how many images the folder holds (``--fraction`` of the 60,000, stratified by class, so a
  shared machine can run a measured part; the report says which);
- ``write_seconds``: writing the PNG folder (not part of the fit);
- ``fit_seconds``: ``torchwork fit PHOTOS/`` in a subprocess, from start to the served artifact written
  and verified (the data report, both models, evaluation, export, verification, report);
- ``peak_rss_mib``: the fit process's peak resident memory (``ru_maxrss`` from ``os.wait4``);
- ``cnn`` and ``efficientnet_lite0``: each model's test accuracy, macro-F1 and training seconds;
  ``served``, ``against_baseline`` (the paired bootstrap interval of the macro-F1 difference),
  ``deploy_variant`` and why each variant was or was not deployed;
- ``load``: the 1-minute load average before and after (other processes share the 2 cores).

Goal (issue 47): 60k images, file to served model in <= 15 min on 2 quiet cores; the fine-tuned model's
test accuracy above the CNN baseline's, or the report says why not.

Run: ``python benchmarks/fit_images.py [--fraction 1.0] [--set key=value ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

from torchwork.data.datasets import fashion_mnist_files, read_idx

CLASSES = ("tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")


def write_folder(root: Path, fraction: float, seed: int) -> int:
    """Fashion-MNIST's training images (a stratified ``fraction`` of them) as ``root/<class>/<index>.png``."""
    files = fashion_mnist_files()
    images, labels = read_idx(files["train_images"]), read_idx(files["train_labels"])
    rng = np.random.default_rng(seed)
    chosen = []
    for c in range(len(CLASSES)):
        members = np.flatnonzero(labels == c)
        chosen += rng.permutation(members)[: max(10, round(len(members) * fraction))].tolist()
    for name in CLASSES:
        (root / name).mkdir(parents=True)
    for i in chosen:
        Image.fromarray(images[i]).save(root / CLASSES[int(labels[i])] / f"{i:05d}.png")
    return len(chosen)


def fit(photos: Path, runs: Path, settings: list[str]) -> tuple[float, float, int]:
    """``torchwork fit PHOTOS/`` in a subprocess: wall seconds, peak RSS in MiB, exit code."""
    command = [sys.executable, "-m", "torchwork.cli", "fit", str(photos), "--set", f"run_dir={runs}",
               *sum((["--set", s] for s in settings), [])]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL if os.environ.get("QUIET") else None)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, process.returncode


def scores(summary: dict[str, Any], name: str) -> dict[str, Any] | None:
    model = summary["models"].get(name)
    return None if model is None else {k: model[k] for k in ("accuracy", "macro_f1", "training_seconds")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=1.0, help="share of the 60,000 images (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a fit setting")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fit-images-") as tmp:
        photos, runs = Path(tmp) / "photos", Path(tmp) / "runs"
        started = time.perf_counter()
        count = write_folder(photos, args.fraction, args.seed)
        written = time.perf_counter() - started
        seconds, rss, code = fit(photos, runs, args.set)
        if code != 0:
            raise SystemExit(f"torchwork fit exited with {code}")
        summary = json.loads(next(runs.glob("*/summary.json")).read_text())
    record({"images": count, "fraction": args.fraction, "settings": args.set, "write_seconds": round(written, 1),
            "fit_seconds": round(seconds, 1), "peak_rss_mib": round(rss), "splits": summary["data"]["splits"],
            "cnn": scores(summary, "cnn"), "efficientnet_lite0": scores(summary, "efficientnet_lite0"),
            "served": summary["served"], "against_baseline": summary["against_baseline"]["difference"],
            "deploy_variant": summary["deploy_variant"], "deploy_choices": summary["deploy_choices"],
            "load": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}})


if __name__ == "__main__":
    main()
