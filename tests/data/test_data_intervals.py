"""Bootstrap intervals of macro-F1: the vectorised score equals scikit-learn's on each resample, the
interval holds the full-sample score, narrows with more rows, and the paired difference sees a gap that two
separate intervals would call overlapping."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from torchwork.data.intervals import _macro_f1_rows, paired_macro_f1


def _predictions(rows: int, accuracy: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, 3, rows)
    wrong = rng.random(rows) > accuracy
    return targets, np.where(wrong, (targets + rng.integers(1, 3, rows)) % 3, targets)


def test_the_vectorised_macro_f1_is_scikit_learns() -> None:
    targets, predictions = _predictions(500, 0.7, 0)
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 500, size=(20, 500))
    ours = _macro_f1_rows(targets[rows], predictions[rows], 3)
    theirs = [f1_score(targets[r], predictions[r], average="macro", labels=[0, 1, 2], zero_division=0) for r in rows]
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_the_interval_holds_the_score_and_narrows_with_more_rows() -> None:
    widths = []
    for rows in (300, 3000):
        targets, predictions = _predictions(rows, 0.75, 2)
        result = paired_macro_f1(targets, predictions, predictions, 3)
        a = result["a"]
        assert a["low"] <= a["macro_f1"] <= a["high"]
        assert result["difference"] == {"value": 0.0, "low": 0.0, "high": 0.0}  # a model against itself
        widths.append(a["high"] - a["low"])
    assert widths[1] < widths[0] / 2  # ~1/sqrt(10) of the width


def test_the_paired_difference_sees_a_gap_that_separate_intervals_hide() -> None:
    targets, better = _predictions(1000, 0.80, 3)
    worse = better.copy()
    flip = np.flatnonzero(better == targets)[:25]  # the same rows, 25 more mistakes
    worse[flip] = (targets[flip] + 1) % 3
    result = paired_macro_f1(targets, better, worse, 3, seed=4)
    assert result["a"]["low"] < result["b"]["high"]  # the separate intervals overlap
    assert result["difference"]["low"] > 0  # the paired one does not include 0


@pytest.mark.parametrize("bad", [dict(rounds=10), dict(level=1.0)])
def test_bad_settings_are_refused(bad) -> None:
    with pytest.raises(ValueError, match="rounds=|level="):
        paired_macro_f1([0, 1], [0, 1], [0, 1], 2, **bad)
