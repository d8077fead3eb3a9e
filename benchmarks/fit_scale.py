"""`torchwork fit` on a ~200k-row labelled CSV built from the real texts torchwork ships: wall time, peak
resident memory, and memory per row.

The rows: every cleaned text of the CrowdFlower tweets (negative / neutral / positive) and of the Rotten
Tomatoes reviews (fresh as positive, rotten as negative), about 51k, then copies drawn with replacement (seeded)
until ``--rows``, each copy lightly perturbed (one word dropped, two neighbours swapped, once or more) until its
normalised text (Unicode NFKC, HTML entities, case, whitespace: what the data report compares) is new: the
report finds no duplicates, though the copies are near-duplicates of real rows (and of each other across the
splits, a leak the report cannot see; the scores of such a run say nothing of the model).

``torchwork fit`` runs in a child process in a temporary folder: the figures are the child's wall time, its
peak resident memory (``ru_maxrss`` of the largest process of the run), and per section of its output
(``== N. ...``) the seconds and the peak RSS sampled every 0.5 s. ``--transformer-rows N`` caps the rows the
transformer trains on (``transformer_train_rows``; its validation and test splits stay whole); ``--quick`` is
``fit --quick`` (no transformer). ``--src DIR`` runs another checkout's ``src`` (old against new code).

Prints one JSON object (benchmarks/results.py logs it in RESULTS.md).
"""

from __future__ import annotations

import argparse
import csv
import html
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md


def normalised(text: str) -> str:
    return " ".join(html.unescape(unicodedata.normalize("NFKC", text)).lower().split())


def real_rows() -> list[tuple[str, str]]:
    """(text, label) of every cleaned tweet and review: 3 classes, the reviews' two mapped onto the tweets'."""
    from torchwork.data import load_dataset

    rows = []
    for name, rename in (("tweets", {}), ("rotten_tomatoes", {"fresh": "positive", "rotten": "negative"})):
        splits = load_dataset(name)
        for part in (splits.train, splits.validation, splits.test):
            rows += [(text, rename.get(splits.classes[y], splits.classes[y])) for text, y in zip(part.texts, part.labels)]
    return rows


def perturb(text: str, rng: random.Random) -> str:
    words = text.split()
    if len(words) > 3:
        del words[rng.randrange(len(words))]
    if len(words) > 1:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)


def build_rows(total: int, seed: int) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The real rows, then perturbed copies drawn with replacement until ``total``, every normalised text new."""
    rng = random.Random(seed)
    rows = real_rows()
    if total < len(rows):
        rows = rng.sample(rows, total)
    seen = {normalised(text) for text, _ in rows}
    originals, skipped = len(rows), 0
    while len(rows) < total:
        text, label = rows[rng.randrange(originals)]
        for _ in range(4):  # more perturbation until new; a short text may have no new variant left
            text = perturb(text, rng)
            if normalised(text) not in seen:
                seen.add(normalised(text))
                rows.append((text, label))
                break
        else:
            skipped += 1
    rng.shuffle(rows)
    return rows, {"real_rows": originals, "copies": len(rows) - originals, "copies_given_up": skipped}


def run_fit(csv_path: Path, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``torchwork fit`` in a child process: wall time, peak RSS, and each section's seconds and peak RSS."""
    columns = getattr(args, "extra", None) or ["--text", "text", "--label", "label"]  # and --model DIR, if any
    command = [str(Path(sys.executable).with_name("torchwork")), "fit", str(csv_path), *columns,
               *(["--quick"] if args.quick else []),
               *(["--set", f"transformer_train_rows={args.transformer_rows}"] if args.transformer_rows else []),
               *[part for setting in args.set for part in ("--set", setting)]]
    env = dict(os.environ, **({"PYTHONPATH": str(Path(args.src).resolve())} if args.src else {}))
    sections: list[dict[str, Any]] = []
    latest = {"cpu_s": 0.0}  # the child's CPU seconds at the last sample: on a shared machine, wall time is
    started = time.perf_counter()  # mostly waiting, and CPU time is what another machine would spend

    def begin(name: str) -> None:
        if sections:
            sections[-1]["seconds"] = round(time.perf_counter() - started - sections[-1]["seconds"], 1)
            sections[-1]["cpu_s"] = round(latest["cpu_s"] - sections[-1]["cpu_s"], 1)
        sections.append({"section": name, "seconds": time.perf_counter() - started, "cpu_s": latest["cpu_s"],
                         "peak_rss_mb": 0})

    begin("start")
    child = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, errors="replace")
    done = threading.Event()
    tick = os.sysconf("SC_CLK_TCK")

    def sample() -> None:
        while not done.wait(0.5):
            try:
                status = Path(f"/proc/{child.pid}/status").read_text()
                stat = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return
            latest["cpu_s"] = (int(stat[11]) + int(stat[12])) / tick  # utime, stime
            rss = int(status.split("VmRSS:")[1].split()[0]) // 1024 if "VmRSS:" in status else 0
            sections[-1]["peak_rss_mb"] = max(sections[-1]["peak_rss_mb"], rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    tail: list[str] = []
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("== "):
            begin(line[3:].strip()[:60])
        tail = (tail + [line.rstrip()])[-40:]
        if args.verbose:
            print(line, end="", file=sys.stderr, flush=True)
    code = child.wait()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    latest["cpu_s"] = usage.ru_utime + usage.ru_stime
    begin("end")
    sections.pop()
    if code:
        raise SystemExit(f"torchwork fit exited with {code}:\n" + "\n".join(tail))
    return {"wall_s": round(wall, 1), "cpu_s": round(latest["cpu_s"], 1), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "sections": sections,
            "output_tail": [line for line in tail if line.strip()][-12:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--transformer-rows", type=int, default=0, help="transformer_train_rows (0: all)")
    parser.add_argument("--quick", action="store_true", help="fit --quick: no transformer")
    parser.add_argument("--set", action="append", default=[], help="another fit setting, KEY=VALUE")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--src", default="", help="the src folder to run (default: the installed torchwork)")
    parser.add_argument("--verbose", action="store_true", help="show fit's output on stderr")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fit-scale-") as tmp:
        rows, made = build_rows(args.rows, args.seed)
        csv_path = Path(tmp) / "texts.csv"
        with open(csv_path, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(rows)
        figures = run_fit(csv_path, Path(tmp), args)
    tokens = sorted(len(text.split()) for text, _ in rows)
    figures = {"rows": len(rows), **made, "median_words": tokens[len(tokens) // 2], "quick": args.quick,
               "transformer_rows": args.transformer_rows or "all", "src": args.src or "installed", **figures,
               "peak_rss_kb_per_row": round(figures["peak_rss_mb"] * 1024 / len(rows), 1)}
    record(figures)


if __name__ == "__main__":
    main()
