"""Plots for run reports, rendered with matplotlib (Agg) to PNG bytes.

Example:
    >>> from torchwork.report.plots import curves_png
    >>> png = curves_png([{"epoch": 0, "train_loss": 1.0}, {"epoch": 1, "train_loss": 0.5}], ["train_loss"])
    >>> png[:4] == b"\\x89PNG"
    True
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any


def new_figure(width: float = 6.0, height: float = 3.4, *grid: int, **options: Any) -> tuple[Any, Any]:
    """A matplotlib figure and axes (Agg, 100 dpi) of ``width`` x ``height`` inches; pass it to :func:`figure_png`.

    ``grid`` (rows, columns) and ``options`` go to ``plt.subplots``, e.g. ``new_figure(9, 3, 1, 3, squeeze=False)``
    for three panels in a row.

    >>> fig, axes = new_figure(6.0, 2.0, 1, 3, squeeze=False)
    >>> axes.shape, figure_png(fig)[:4] == b"\\x89PNG"
    ((1, 3), True)
    """
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt.subplots(*grid, figsize=(width, height), dpi=100, **options)


def figure_png(fig: Any) -> bytes:
    """The figure as PNG bytes (laid out tight); the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def curves_png(history: Sequence[dict[str, Any]], keys: Sequence[str], title: str = "") -> bytes:
    """Per-epoch curves of ``keys`` from a Trainer history."""
    fig, ax = new_figure()
    epochs = [h["epoch"] for h in history]
    for key in keys:
        values = [h.get(key) for h in history]
        if any(v is not None for v in values):
            ax.plot(epochs, values, marker="o", label=key)
    ax.set_xlabel("epoch")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return figure_png(fig)


def confusion_png(matrix: Sequence[Sequence[int]], classes: Sequence[str]) -> bytes:
    """A confusion matrix: rows are true classes, columns predictions, cells counts."""
    import numpy as np

    data = np.asarray(matrix)
    fig, ax = new_figure(4.6, 4.0)
    ax.imshow(data, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=30)
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(data.shape[0]):
        for j in range(data.shape[1]):
            ax.text(j, i, str(data[i, j]), ha="center", va="center",
                    color="white" if data[i, j] > data.max() / 2 else "black")
    return figure_png(fig)


def grouped_bars_png(groups: Sequence[str], series: dict[str, Sequence[float]], ylabel: str) -> bytes:
    """Bars per group for each series (e.g. per-class F1: model against baseline)."""
    fig, ax = new_figure()
    width = 0.8 / max(1, len(series))
    for index, (name, values) in enumerate(series.items()):
        positions = [g + index * width for g in range(len(groups))]
        ax.bar(positions, values, width=width, label=name)
        for x, v in zip(positions, values):
            ax.text(x, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05)
    ax.legend()
    return figure_png(fig)
