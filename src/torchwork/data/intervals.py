"""How sure a test score is: 95% bootstrap intervals of macro-F1, for one model and for the difference
between two models scored on the same test rows (a paired bootstrap: each round resamples the rows once
and scores both models on them, so what the rows have in common cancels out).

Percentile intervals over ``rounds`` resamples of the test rows with replacement (Efron and Tibshirani, *An
Introduction to the Bootstrap*, 1993, ch. 13; the paired form for comparing systems on one test set:
Koehn, "Statistical Significance Tests for Machine Translation Evaluation", EMNLP 2004).

Example:
    >>> from torchwork.data.intervals import paired_macro_f1
    >>> targets = [0, 1] * 200
    >>> better, worse = list(targets), [t if i % 4 else 1 - t for i, t in enumerate(targets)]
    >>> result = paired_macro_f1(targets, better, worse, num_classes=2)
    >>> result["difference"]["low"] > 0, result["a"]["macro_f1"], result["b"]["macro_f1"] < 1
    (True, 1.0, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchwork.data.metrics import class_ids
from torchwork.errors import ConfigError, DataError
from torchwork.finite import check_count, is_finite_number
from torchwork.quoting import quote_value
from torchwork.seeding import check_seed

# A percentile interval is steady by a few thousand resamples (Efron and Tibshirani ask 1000 or more); each
# costs a pass over every test row, so 100,000 of them is already minutes on a large test set.
MAX_ROUNDS = 100_000
# Each block of 100 resamples counts 100 x num_classes**2 confusion cells (8 bytes each): 800 MB at 1000
# classes, so more would not fit in memory.
MAX_CLASSES = 1000


def _macro_f1_rows(targets: np.ndarray, predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """Macro-F1 of each row of ``targets``/``predictions`` (shape: rounds x test rows), vectorised."""
    rounds = targets.shape[0]
    offsets = (np.arange(rounds) * num_classes * num_classes)[:, None]
    cells = np.bincount((offsets + targets * num_classes + predictions).ravel(),
                        minlength=rounds * num_classes * num_classes).reshape(rounds, num_classes, num_classes)
    true_pos = np.diagonal(cells, axis1=1, axis2=2).astype(np.float64)
    predicted, actual = cells.sum(axis=1), cells.sum(axis=2)
    denominator = predicted + actual  # F1 = 2 TP / (predicted + actual); 0 where a class is absent and unpredicted
    f1 = np.divide(2 * true_pos, denominator, out=np.zeros_like(true_pos), where=denominator > 0)
    return f1.mean(axis=1)


def _interval(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return round(float(low), 6), round(float(high), 6)


def _check_settings(num_classes: int, rounds: int, level: float, seed: int) -> None:
    """Refuse a setting of :func:`paired_macro_f1` before any row is read or resampled."""
    check_count(num_classes, "num_classes", 1, MAX_CLASSES, " (the classes the ids count from 0)")
    check_count(rounds, "rounds", 100, MAX_ROUNDS, " (bootstrap resamples; 1000 is plenty for a 95% interval)")
    if not is_finite_number(level) or not 0 < level < 1:
        raise ConfigError(f"level={quote_value(level)} must be a number between 0 and 1 (exclusive), e.g. 0.95 "
                          "for a 95% interval.")
    check_seed(seed)


def paired_macro_f1(targets: Any, predictions_a: Any, predictions_b: Any, num_classes: int, *,
                    rounds: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Macro-F1 of models ``a`` and ``b`` on the same test rows and of ``a - b``, each with its ``level``
    bootstrap interval: ``{"a": {"macro_f1", "low", "high"}, "b": {...}, "difference": {"value", "low",
    "high"}, "rounds", "level"}``. ``a`` beats ``b`` beyond the noise when the difference's ``low`` is > 0."""
    _check_settings(num_classes, rounds, level, seed)
    t, a, b = (class_ids(x, name) for x, name in ((targets, "targets"), (predictions_a, "predictions_a"),
                                                  (predictions_b, "predictions_b")))
    if not (t.size == a.size == b.size) or t.size == 0:
        raise ConfigError(f"targets ({t.size}), predictions_a ({a.size}) and predictions_b ({b.size}) must be "
                          "the same, non-zero number of rows.")
    largest = int(max(t.max(), a.max(), b.max()))
    if largest >= num_classes:
        raise DataError(f"a class id {largest} is >= the num_classes={num_classes} given: pass "
                        f"num_classes={largest + 1} or more.")
    rng = np.random.default_rng(seed)
    scores_a, scores_b = [], []
    for start in range(0, rounds, 100):  # 100 resamples at a time: memory stays rounds-independent
        rows = rng.integers(0, t.size, size=(min(100, rounds - start), t.size))
        scores_a.append(_macro_f1_rows(t[rows], a[rows], num_classes))
        scores_b.append(_macro_f1_rows(t[rows], b[rows], num_classes))
    all_a, all_b = np.concatenate(scores_a), np.concatenate(scores_b)
    full_a, full_b = (float(_macro_f1_rows(t[None], p[None], num_classes)[0]) for p in (a, b))

    def summary(full: float, values: np.ndarray) -> dict[str, float]:
        low, high = _interval(values, level)
        return {"macro_f1": round(full, 6), "low": low, "high": high}

    low, high = _interval(all_a - all_b, level)
    return {"a": summary(full_a, all_a), "b": summary(full_b, all_b),
            "difference": {"value": round(full_a - full_b, 6), "low": low, "high": high},
            "rounds": rounds, "level": level}
