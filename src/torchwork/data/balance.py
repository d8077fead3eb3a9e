"""Class imbalance: loss weights, a balanced sampler, and metrics that show every class.

Accuracy hides a neglected minority class; per-class recall, macro-F1 and the confusion matrix do not.

Example:
    >>> from torchwork.data.balance import class_weights, classification_metrics, format_metrics
    >>> [round(w, 4) for w in class_weights([0, 0, 0, 1]).tolist()]
    [0.6667, 2.0]
    >>> m = classification_metrics([0, 0, 0, 1], [0, 0, 0, 0], classes=["neg", "pos"])
    >>> m["accuracy"], m["macro_f1"], m["per_class"]["pos"]["recall"]
    (0.75, 0.428571, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from torchwork.errors import ConfigError, DataError

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.utils.data import WeightedRandomSampler


def _labels(labels: Any, name: str = "labels") -> np.ndarray:
    array = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise DataError(f"{name} must be a 1-D sequence of integer class ids, got dtype {array.dtype} and "
                        f"shape {array.shape}. Take argmax(dim=1) of class scores first.")
    if array.size and array.min() < 0:
        raise DataError(f"{name} holds a negative class id ({array.min()}); class ids start at 0.")
    return array.astype(np.int64)


def _counts(labels: Any, num_classes: int | None) -> np.ndarray:
    array = _labels(labels)
    if array.size == 0:
        raise DataError("no labels given: class balance needs the training labels (e.g. dataset.labels).")
    n = num_classes if num_classes is not None else int(array.max()) + 1
    if array.max() >= n:
        raise DataError(f"label {array.max()} does not fit num_classes={n}.")
    return np.bincount(array, minlength=n)


def class_weights(labels: Any, num_classes: int | None = None, power: float = 1.0) -> torch.Tensor:
    """Loss weights ``(N / count) ** power``, normalized so that the average *sample* weight is 1.

    With ``power=1`` these equal scikit-learn's ``compute_class_weight("balanced")``.
    Pass them as ``nn.CrossEntropyLoss(weight=class_weights(train.labels))``. ``power=0.5`` is the milder
    inverse square root. A class absent from ``labels`` gets weight 0 (and a clear error if that is all).
    Compute them from the training split only.
    """
    import torch

    if power < 0:
        raise ConfigError(f"power={power} must be >= 0 (1 = inverse frequency, 0 = no weighting).")
    counts = _counts(labels, num_classes).astype(np.float64)
    present = counts > 0
    weights = np.zeros_like(counts)
    weights[present] = (counts.sum() / counts[present]) ** power
    weights *= counts.sum() / (weights * counts).sum()  # mean weight over the samples is 1
    return torch.tensor(weights, dtype=torch.float32)


def balanced_sampler(labels: Any, num_samples: int | None = None, seed: int = 0,
                     replacement: bool = True) -> WeightedRandomSampler:
    """A seeded ``WeightedRandomSampler`` that draws every class equally often on average.

    Use it instead of ``shuffle=True`` (``loader(..., balance=True)`` does this). An epoch has
    ``num_samples`` draws (default: the dataset size), with replacement, so minority rows repeat.
    """
    import torch
    from torch.utils.data import WeightedRandomSampler

    array = _labels(labels)
    counts = _counts(array, None)
    per_sample = 1.0 / counts[array]
    generator = torch.Generator().manual_seed(seed)
    # A list of Python floats (float64, as torch makes of it) is the sequence the sampler documents.
    return WeightedRandomSampler(per_sample.astype(np.float64).tolist(),
                                 num_samples or len(array), replacement=replacement, generator=generator)


def confusion_matrix(targets: Any, predictions: Any, num_classes: int) -> np.ndarray:
    """``matrix[true, predicted]`` counts."""
    t, p = _labels(targets, "targets"), _labels(predictions, "predictions")
    if t.shape != p.shape:
        raise DataError(f"targets has {t.size} rows but predictions has {p.size}; they must match.")
    if t.size and max(t.max(), p.max()) >= num_classes:
        raise DataError(f"a class id {max(t.max(), p.max())} is >= the {num_classes} classes given.")
    return np.bincount(t * num_classes + p, minlength=num_classes * num_classes).reshape(num_classes,
                                                                                          num_classes)


def classification_metrics(targets: Any, predictions: Any, classes: Sequence[str] | int | None = None,
                           digits: int = 6) -> dict[str, Any]:
    """Per-class precision / recall / F1 / support, macro and weighted F1, accuracy, confusion matrix.

    ``predictions`` are class ids (take ``argmax(dim=1)`` of scores). A class never predicted has
    precision 0, one never present has recall 0 (scikit-learn's ``zero_division=0``). Returns plain JSON
    types; :func:`format_metrics` prints it as a table.
    """
    t, p = _labels(targets, "targets"), _labels(predictions, "predictions")
    if isinstance(classes, int) or classes is None:
        n = classes if isinstance(classes, int) else int(max(t.max(initial=0), p.max(initial=0))) + 1
        names = [str(i) for i in range(n)]
    else:
        names = [str(c) for c in classes]
    matrix = confusion_matrix(t, p, len(names))
    true_pos = np.diag(matrix).astype(np.float64)
    predicted, actual = matrix.sum(axis=0), matrix.sum(axis=1)
    precision = np.divide(true_pos, predicted, out=np.zeros_like(true_pos), where=predicted > 0)
    recall = np.divide(true_pos, actual, out=np.zeros_like(true_pos), where=actual > 0)
    denominator = precision + recall
    f1 = np.divide(2 * precision * recall, denominator, out=np.zeros_like(true_pos), where=denominator > 0)
    total = int(matrix.sum())
    per_class = {name: {"precision": round(float(precision[i]), digits), "recall": round(float(recall[i]), digits),
                        "f1": round(float(f1[i]), digits), "support": int(actual[i])}
                 for i, name in enumerate(names)}
    return {
        "accuracy": round(float(true_pos.sum() / total), digits) if total else 0.0,
        "macro_f1": round(float(f1.mean()), digits),
        "weighted_f1": round(float((f1 * actual).sum() / total), digits) if total else 0.0,
        "per_class": per_class,
        "classes": names,
        "confusion_matrix": matrix.tolist(),
        "support": total,
    }


def format_metrics(metrics: dict[str, Any]) -> str:
    """A readable table of :func:`classification_metrics`, confusion matrix included.

    Example:
        >>> print(format_metrics(classification_metrics([0, 1, 1], [0, 1, 0], ["neg", "pos"])))
        class  precision  recall     f1  support
        neg        0.500   1.000  0.667        1
        pos        1.000   0.500  0.667        2
        accuracy 0.667   macro-F1 0.667   weighted-F1 0.667   (3 rows)
        confusion matrix (rows: true class, columns: predicted)
               neg  pos
        neg      1    0
        pos      1    1
    """
    names = metrics["classes"]
    width = max(5, *(len(n) for n in names))
    lines = [f"{'class':<{width}}  precision  recall     f1  support"]
    for name in names:
        row = metrics["per_class"][name]
        lines.append(f"{name:<{width}}  {row['precision']:>9.3f}  {row['recall']:>6.3f}  {row['f1']:>5.3f}"
                     f"  {row['support']:>7,}")
    lines.append(f"accuracy {metrics['accuracy']:.3f}   macro-F1 {metrics['macro_f1']:.3f}   "
                 f"weighted-F1 {metrics['weighted_f1']:.3f}   ({metrics['support']:,} rows)")
    lines.append("confusion matrix (rows: true class, columns: predicted)")
    cell = max(4, *(len(n) for n in names), *(len(f"{v:,}") for r in metrics["confusion_matrix"] for v in r))
    lines.append(" " * width + "".join(f" {n:>{cell}}" for n in names))
    for name, row in zip(names, metrics["confusion_matrix"]):
        lines.append(f"{name:<{width}}" + "".join(f" {v:>{cell},}" for v in row))
    return "\n".join(lines)
