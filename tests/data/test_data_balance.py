"""Class weights, the balanced sampler and imbalance-aware metrics, checked against scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support
from sklearn.utils.class_weight import compute_class_weight

from torchwork.data import (
    balanced_sampler,
    class_weights,
    classification_metrics,
    format_metrics,
    load_dataset,
)
from torchwork.errors import DataError


def test_class_weights_on_real_tweets_match_sklearn_balanced() -> None:
    labels = load_dataset("tweets").train.labels
    ours = class_weights(labels)
    expected = compute_class_weight("balanced", classes=np.arange(3), y=np.asarray(labels))
    assert torch.allclose(ours, torch.tensor(expected, dtype=torch.float32))
    assert ours[2] > ours[1] > ours[0]  # positive is the rarest class
    counts = np.bincount(labels)
    assert float((ours.numpy() * counts).sum() / counts.sum()) == pytest.approx(1.0)
    milder = class_weights(labels, power=0.5)
    assert milder[2] / milder[0] < ours[2] / ours[0]


def test_absent_class_gets_zero_weight() -> None:
    assert class_weights([0, 0, 2], num_classes=3)[1] == 0
    with pytest.raises(DataError, match="integer class ids"):
        class_weights([0.5, 1.0])


def test_balanced_sampler_draws_classes_equally_and_repeatably() -> None:
    labels = load_dataset("tweets").train.labels
    draws = list(balanced_sampler(labels, num_samples=30_000, seed=1))
    shares = np.bincount(np.asarray(labels)[draws], minlength=3) / len(draws)
    assert np.all(np.abs(shares - 1 / 3) < 0.02)
    assert list(balanced_sampler(labels, num_samples=50, seed=1)) == draws[:50]


def test_metrics_match_sklearn() -> None:
    rng = np.random.default_rng(0)
    targets = rng.choice(3, size=500, p=[0.7, 0.2, 0.1])
    predictions = np.where(rng.random(500) < 0.6, targets, rng.integers(0, 3, 500))
    m = classification_metrics(targets, torch.as_tensor(predictions), ["neg", "neu", "pos"])
    p, r, f, s = precision_recall_fscore_support(targets, predictions, zero_division=0)
    for i, name in enumerate(["neg", "neu", "pos"]):
        assert m["per_class"][name]["precision"] == pytest.approx(p[i], abs=1e-6)
        assert m["per_class"][name]["recall"] == pytest.approx(r[i], abs=1e-6)
        assert m["per_class"][name]["f1"] == pytest.approx(f[i], abs=1e-6)
        assert m["per_class"][name]["support"] == s[i]
    assert m["macro_f1"] == pytest.approx(f1_score(targets, predictions, average="macro"), abs=1e-6)
    assert m["weighted_f1"] == pytest.approx(f1_score(targets, predictions, average="weighted"), abs=1e-6)
    assert m["confusion_matrix"] == confusion_matrix(targets, predictions).tolist()


def test_metrics_expose_a_neglected_minority_class() -> None:
    m = classification_metrics([0] * 95 + [1] * 5, [0] * 100, ["majority", "minority"])
    assert m["accuracy"] == 0.95 and m["per_class"]["minority"]["recall"] == 0.0
    assert m["macro_f1"] < 0.5
    table = format_metrics(m)
    assert "minority" in table and "macro-F1 0.487" in table and "confusion matrix" in table
    with pytest.raises(DataError, match="must match"):
        classification_metrics([0, 1], [0])
