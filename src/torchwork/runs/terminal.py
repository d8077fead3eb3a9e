"""Text from a run folder made safe for a terminal: control characters escaped, secrets masked.

A folder name or a manifest is data anyone may have written: an escape sequence in it would retitle, clear
or hide lines of the user's terminal, and a password in a recorded command line must not be shown. Every
string ``runs ls/show/diff`` print from a folder passes through :func:`shown`.

Example:
    >>> printable("run\\x1b]0;owned\\x07 done\\n")
    'run\\\\x1b]0;owned\\\\x07 done\\\\n'
    >>> shown("postgresql://u:pw@h/db\\x1b[2J")
    'postgresql://u:***@h/db\\\\x1b[2J'
"""

from __future__ import annotations

import re
from typing import Any

from torchwork.masking import map_strings, mask_secrets

# C0 and C1 controls, DEL, and the invisible marks that reorder or hide text (bidirectional overrides).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def printable(text: str) -> str:
    """``text`` with every control character written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _CONTROL.sub(lambda match: ascii(match.group())[1:-1], text)


def shown(text: str) -> str:
    """What a terminal may show of ``text``: its secrets masked, its control characters escaped."""
    return printable(mask_secrets(text))


def shown_values(value: Any) -> Any:
    """JSON-like data with :func:`shown` applied to every string, keys included."""
    return map_strings(value, shown)
