"""Whether a value given as a number is one a float holds: the check every setting and record read goes
through.

``math.isfinite`` raises ``OverflowError`` on an integer past what a float holds (``10**400``, which Python,
JSON and YAML all read as an ``int``), so a plain ``not math.isfinite(value)`` let such a setting escape its
own check as a traceback. :func:`is_finite_number` answers False instead.

Example:
    >>> from torchwork.finite import is_finite_number
    >>> [is_finite_number(v) for v in (3, 0.5, float("nan"), float("inf"), 10**400, True, "1")]
    [True, True, False, False, False, False, False]
    >>> [is_count(v, 1, 64) for v in (1, 64, 0, 65, 2.0, True)]
    [True, True, False, False, False, False]
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

from torchwork.errors import ConfigError
from torchwork.quoting import quote_value


def is_finite_number(value: Any) -> bool:
    """True for a real number (an int, a float, numpy's float32 or int64 scalars) that is neither NaN nor
    infinite and that a float holds; False for a bool (``True`` is no number of anything), an integer past
    about 1.8e308, text and everything else."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range
        return False


def is_count(value: Any, least: float, most: float) -> bool:
    """True for an int (not a bool, not a whole float: ``2.0`` is a fraction's type) from ``least`` to
    ``most``; numpy's and torch's integer scalars count (they implement ``__index__``)."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        return False
    try:
        whole = operator.index(value)
    except TypeError:  # numpy's bool_, a tensor of several elements: an __index__ that refuses
        return False
    return least <= whole <= most


def check_count(value: Any, name: str, low: int, high: int, note: str = "") -> int:
    """``value`` as an int when :func:`is_count` takes it (``low`` to ``high``), else a one-line ConfigError
    naming ``name``, the range and ``note`` (what the count is, why the bound, or the alternative such as
    ``, or None``), with the value quoted safely however large it is.

    Example:
        >>> check_count(8, "batch_size", 1, 2**20)
        8
        >>> check_count(10**5000, "rounds", 100, 100_000)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: rounds=<an integer of 5001 digits or so> must be an integer in [100, 100000].
    """
    if is_count(value, low, high):
        return operator.index(value)
    raise ConfigError(f"{name}={quote_value(value)} must be an integer in [{low}, {high}]{note}.")
