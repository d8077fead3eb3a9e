"""Two argument shapes the public functions share: a flag is True or False, and a list of names may be given
as one name.

Python takes any object as a flag (``compile="no"`` is true) and iterates a string as its characters
(``variants="onnx"`` asked for the variants 'o', 'n', 'x'): both are checked here, once, before any work.

Example:
    >>> name_list("onnx", "variants"), name_list(["onnx", "int8"], "variants"), name_list(None, "variants")
    (('onnx',), ('onnx', 'int8'), None)
    >>> check_flag(True, "compile")
    True
    >>> check_flag("no", "compile")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: compile='no': pass True or False.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchwork.errors import ConfigError
from torchwork.quoting import quote_value

MAX_NAMES = 10_000  # names in one list: far past any real list of variants, checks or devices


def check_flag(value: Any, name: str) -> bool:
    """``value`` when it is a bool (numpy's ``bool_`` too), else a ConfigError naming ``name``."""
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):  # numpy 2 and 1
        return bool(value)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={quote_value(value)}: pass True or False.")
    return value


def name_list(value: Any, name: str) -> tuple[str, ...] | None:
    """``value`` as a tuple of non-empty strings: a string is one name, an iterable of strings is several,
    None stays None (the caller's default); anything else is a ConfigError naming ``name``."""
    if value is None:
        return None
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, Iterable) or isinstance(value, (bytes, bytearray)):
        raise ConfigError(f"{name}={quote_value(value)}: give a name or a list of names (strings).")
    names: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{name}: {quote_value(item)} is no name; give a name or a list of names "
                              "(non-empty strings).")
        if len(names) == MAX_NAMES:
            raise ConfigError(f"{name}: more than {MAX_NAMES:,} names; give the ones you mean.")
        names.append(item)
    return tuple(names)
