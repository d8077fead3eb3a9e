"""Where a thing happened, written for a person: ``file:line`` relative to the working directory.

Shared by the doctor's findings, the graph's pages and every message that names a line of user code; it
sits at the bottom of the house so that each of them can use it.

Example:
    >>> format_where(("/elsewhere/train.py", 12))
    '/elsewhere/train.py:12'
    >>> format_where(None)
    'an unknown line'
"""

from __future__ import annotations

import os


def display_path(filename: str | None) -> str | None:
    """A path relative to the working directory when it lies inside it, else as given."""
    if filename is None or filename.startswith("<"):
        return filename
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def format_where(where: tuple[str, int] | None, default: str = "an unknown line") -> str:
    """'file:line' for a message (relative to the working directory when inside it)."""
    if where is None:
        return default
    return f"{display_path(where[0])}:{where[1]}"
