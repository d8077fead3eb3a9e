"""Metrics that show every class: accuracy hides a neglected minority class; per-class recall, macro-F1 and
the confusion matrix do not.

Example:
    >>> from torchwork.data.metrics import classification_metrics, format_metrics
    >>> m = classification_metrics([0, 0, 0, 1], [0, 0, 0, 0], classes=["neg", "pos"])
    >>> m["accuracy"], m["macro_f1"], m["per_class"]["pos"]["recall"]
    (0.75, 0.428571, 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from torchwork.errors import DataError
from torchwork.finite import check_count

MAX_DIGITS = 17  # float64 holds 15 to 17 significant digits: more rounds nothing
# The confusion matrix has classes**2 int64 cells: 10,000 classes is 800 MB already.
MAX_CLASSES = 10_000


def class_ids(labels: Any, name: str = "labels") -> np.ndarray:
    """``labels`` (a sequence, array or tensor of class ids) as a 1-D int64 array, checked."""
    array = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise DataError(f"{name} must be a 1-D sequence of integer class ids, got dtype {array.dtype} and "
                        f"shape {array.shape}. Take argmax(dim=1) of class scores first.")
    if array.size and array.min() < 0:
        raise DataError(f"{name} holds a negative class id ({array.min()}); class ids start at 0.")
    return array.astype(np.int64)


def confusion_matrix(targets: Any, predictions: Any, num_classes: int) -> np.ndarray:
    """``matrix[true, predicted]`` counts."""
    t, p = class_ids(targets, "targets"), class_ids(predictions, "predictions")
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
    digits = check_count(digits, "digits", 0, MAX_DIGITS, " (decimals kept of each score; float64 holds 17 "
                         "significant digits)")
    if isinstance(classes, (int, np.integer)):  # a bool too: True is no class count
        classes = check_count(classes, "classes", 1, MAX_CLASSES, " (the number of classes), a list of class "
                              "names, or None")
    t, p = class_ids(targets, "targets"), class_ids(predictions, "predictions")
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
