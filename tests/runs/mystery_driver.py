"""Runs the n-gram sentiment recipe on a small subset, for the runs-diff mystery test.

``python mystery_driver.py '{"lr": 0.1}'`` overrides settings. When ``label_fixes.json`` exists in the
working directory (``{"share": 0.05}``), that share of the training rows is relabelled after the subset is
drawn, as a user's label corrections would be: the code and the command stay the same, only the data
changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torchwork.recipes.sentiment as recipe
from torchwork.data import TextDataset

FIXES = Path("label_fixes.json")
_draw = recipe.stratified_subset
_drawn: list[int] = []


def _subset_with_fixes(split, rows, seed):
    picked = _draw(split, rows, seed)
    if not _drawn and FIXES.exists():  # the recipe draws the train split first
        share = json.loads(FIXES.read_text())["share"]
        every = round(1 / share)
        labels = [(y + 1) % 3 if i % every == every - 1 else y for i, y in enumerate(picked.labels)]
        picked = TextDataset(picked.texts, labels)
    _drawn.append(len(picked))
    return picked


def main() -> None:
    recipe.stratified_subset = _subset_with_fixes  # the name the recipe calls
    settings = {"model": "ngram", "subset": 300, "run_dir": "runs", "precision": "32", "threads": 1, "epochs": 6,
                "batch_size": 32, "quantize": False, "export_formats": ("pt2",), "verify_rounds": 5, **json.loads(sys.argv[1])}
    recipe.run(recipe.SentimentConfig(**settings))


if __name__ == "__main__":  # pytest imports this file for its doctests; only the test runs it
    main()
