"""Secrets hidden from what torchwork records or prints: one masking rule for URLs, command lines and text.

A password given on the command line (``--storage postgresql://USER:PASSWORD@HOST/DB``) must not reach a run's
manifest, a report page or a terminal. :func:`mask_secrets` hides, in any text, a URL's password (``user:pw@``
and ``:pw@``) and the values of secret query parameters (``password=``, ``pwd=``, ``token=``, ``secret=``,
``key=``, ``api_key=``..., in any case); :func:`mask_argv` does the same for each argument of a command line
and hides the value of a secret flag (``--password X``, ``--api-key=X``). :func:`mask_values` applies
:func:`mask_secrets` to every string of JSON-like data.

Example:
    >>> mask_secrets("postgresql://tuner:s3cret@db:5432/studies")
    'postgresql://tuner:***@db:5432/studies'
    >>> mask_secrets("postgresql://:s3cret@db/studies?sslmode=require&Password=x&api_key=y")
    'postgresql://:***@db/studies?sslmode=require&Password=***&api_key=***'
    >>> mask_argv(["torchwork", "tune", "x.yaml", "--storage=mysql://u:pw@h/db", "--token", "abc"])
    ['torchwork', 'tune', 'x.yaml', '--storage=mysql://u:***@h/db', '--token', '***']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

MASK = "***"
# The last word of a parameter or flag name that says its value is a secret.
SECRET_WORDS = ("password", "passwd", "pwd", "token", "secret", "key", "apikey", "credentials")
_WORDS = "|".join(SECRET_WORDS)
_NAME = r"(?:[A-Za-z0-9_.\-]*[_.\-])?(?:" + _WORDS + r")|[A-Za-z0-9_.\-]*(?:password|secret|token)"
# scheme://[user]:password@ : the password runs to the last '@' of the word (an unescaped '@' or '/' in it
# hides more than the password rather than showing a part of it)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]*:)\S*@(?=[^\s@]*(?:\s|$))")
_QUERY = re.compile(r"([?&;](?:" + _NAME + r")=)[^&;#\s]*", re.IGNORECASE)
_FLAG = re.compile(r"^(--?(?:" + _NAME + r"))(=.*)?$", re.IGNORECASE | re.DOTALL)


def mask_secrets(text: str) -> str:
    """``text`` with every URL password and secret query parameter replaced by ``***``."""
    if "=" not in text and "@" not in text:
        return text
    return _QUERY.sub(r"\1" + MASK, _USERINFO.sub(r"\1" + MASK + "@", text))


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line with its secrets masked: in every argument as :func:`mask_secrets` does, and the
    value of a secret flag (``--password X``, ``--api-key=X``, ``--token X``)."""
    masked: list[str] = []
    hide_next = False
    for argument in argv:
        flag = _FLAG.match(argument)
        if hide_next and not argument.startswith("-"):
            masked.append(MASK)
        elif flag is not None and flag.group(2) is not None:
            masked.append(flag.group(1) + "=" + MASK)
        else:
            masked.append(mask_secrets(argument))
        hide_next = flag is not None and flag.group(2) is None
    return masked


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (dicts, lists, tuples, strings, numbers...) with ``change`` applied to every string, keys
    included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {map_strings(k, change): map_strings(v, change) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_strings(v, change) for v in value)
    return value


def mask_values(value: Any) -> Any:
    """JSON-like data with :func:`mask_secrets` applied to every string."""
    return map_strings(value, mask_secrets)
