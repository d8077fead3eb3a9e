"""How a refused value appears in an error message: enough to recognise it, never all of a huge one.

An error quotes what it refuses, and what it refuses may be enormous: a 5,000-digit integer (whose ``repr``
Python itself refuses past 4,300 digits), a setting of 10**400 (which ``float()`` cannot hold), a list of a
million items. :func:`quote_value` gives each a short, readable form.

Example:
    >>> from torchwork.quoting import quote_value
    >>> quote_value(0.5), quote_value(10**20), quote_value(10**50), quote_value(10**5000)
    ('0.5', '100000000000000000000', '1e+50', '<an integer of 5001 digits or so>')
    >>> quote_value("x" * 100)
    "'xxxxxxxxxxxxxxx...xxxxxxx' (102 characters)"
"""

from __future__ import annotations

import math
from typing import Any

MAX_ITEMS = 64  # a longer list or mapping is named by its size, not rendered


def quote_value(value: Any, limit: int = 40) -> str:
    """``repr(value)`` for a message, at most about ``limit`` characters: a long text keeps its start and end
    and says its length; an integer too long for it is written as 1e+50, or by its digit count past what a
    float holds."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** (limit - 1):
        return _large_integer(value)
    if isinstance(value, (list, tuple, dict, set)) and len(value) > MAX_ITEMS:
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value)
    if len(text) <= limit:
        return text
    head = max(limit * 2 // 5, 4)
    tail = max(limit // 5, 2)
    return f"{text[:head]}...{text[-tail:]} ({len(text)} characters)"


def _large_integer(value: int) -> str:
    try:
        return f"{value:.3g}"
    except OverflowError:  # past what a float holds (about 1.8e308)
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        return f"<an integer of {digits} digits or so>"
