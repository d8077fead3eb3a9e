"""How many batches a loader has, when it knows.

Example:
    >>> from torchwork.data.lengths import length_or_none
    >>> length_or_none([1, 2, 3]), length_or_none(iter([1]))
    (3, None)
"""

from __future__ import annotations

from typing import Any


def length_or_none(obj: Any) -> int | None:
    """``len(obj)``, or None for iterables without a length (generators, iterable datasets)."""
    try:
        return len(obj)
    except TypeError:
        return None
