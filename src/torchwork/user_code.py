"""The user's own function, named by a string: ``path/to/file.py:function`` or ``package.module:function``.

What torchwork loads this way (an export's model factory, a study's objective) is code the user wrote and
asked torchwork to run; a name is a string, so it crosses a process boundary (a tuning worker started again
after a crash loads it anew) where a pickled closure would not.

Example:
    >>> load_function("json:dumps", "function").__name__
    'dumps'
    >>> load_function("no-colon", "objective", "a function of the trial returning its score")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: 'no-colon' is not an objective: write path/to/file.py:function or package.module:function (a function of the trial returning its score).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError


def is_file_spec(target: str) -> bool:
    """Whether the part before the colon names a file (rather than a module)."""
    return target.endswith(".py") or "/" in target or os.sep in target


def load_function(spec: str, what: str, returns: str = "a function") -> Callable[..., Any]:
    """``file.py:function`` or ``package.module:function`` -> the function; ``what`` names it in errors."""
    target, _, name = spec.rpartition(":")
    article = "an" if what[:1] in "aeiou" else "a"
    if not target or not name.isidentifier():
        raise ConfigError(f"{spec!r} is not {article} {what}: write path/to/file.py:function or "
                          f"package.module:function ({returns}).")
    if is_file_spec(target):
        path = Path(target).resolve()
        if not path.is_file():
            raise ConfigError(f"{what} file {target} does not exist.")
        module_spec = importlib.util.spec_from_file_location(f"_torchwork_{what.replace(' ', '_')}_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise ConfigError(f"cannot load {target} as a Python module.")
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, str(path.parent))  # so that the file can import its neighbours
        try:
            module_spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as error:
            raise ConfigError(f"cannot import {target!r} for the {what} {spec!r}: {error}.") from error
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"{target} has no function {name!r}.")
    return function
