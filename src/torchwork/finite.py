"""Whether a value given as a number is one a float holds: the check every setting and record read goes
through.

``math.isfinite`` raises ``OverflowError`` on an integer past what a float holds (``10**400``, which Python,
JSON and YAML all read as an ``int``), so a plain ``not math.isfinite(value)`` let such a setting escape its
own check as a traceback. :func:`is_finite_number` answers False instead.

Example:
    >>> from torchwork.finite import is_finite_number
    >>> [is_finite_number(v) for v in (3, 0.5, float("nan"), float("inf"), 10**400, True, "1")]
    [True, True, False, False, False, False, False]
"""

from __future__ import annotations

import math
from typing import Any


def is_finite_number(value: Any) -> bool:
    """True for an int or a float that is neither NaN nor infinite and that a float holds; False for a bool
    (``True`` is no number of anything), an integer past about 1.8e308, text and everything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False
