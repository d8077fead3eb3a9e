"""Selecting parameters by module-name glob: a pattern names a module and everything inside it.

Example:
    >>> matches("encoder.layer.3.attention.weight", ["encoder.layer.[0-3]"])
    True
    >>> matches("encoder.layer.10.weight", ["encoder.layer.1"])
    False
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence


def matches(name: str, patterns: Sequence[str]) -> bool:
    """Whether ``name`` (a parameter or state-dict key) is, or lies inside, a module a pattern names."""
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*") for p in patterns)
