"""Plain-text tables for the fine-tuning reports (left-aligned text, right-aligned numbers).

Example:
    >>> print(format_table(["module", "loaded"], [["encoder", 12], ["head", 0]]))
    module   loaded
    encoder      12
    head          0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers are right-aligned."""
    cells = [[str(c) for c in header], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) and bool(rows) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)
