"""A model factory: the user's function that builds what ``torchwork export`` (or ``torchwork graph``) needs.

``path/to/file.py:build`` or ``package.module:build`` names a function of no arguments that returns
``{"model": ..., "example_inputs": ...}`` (optionally the other :data:`FACTORY_KEYS`) or a
``(model, example_inputs)`` pair. The factory is the user's own code, which they asked to run.

Example:
    >>> load_factory("no-colon")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: 'no-colon' is not a model factory: write path/to/file.py:function or package.module:function (a function returning the model and example inputs).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError

FACTORY_KEYS = {"model", "example_inputs", "preprocess", "labels", "softmax", "samples", "targets", "input_names",
                "output_names", "dynamic_length"}


def load_factory(spec: str) -> Callable[[], Any]:
    """``file.py:function`` or ``package.module:function`` -> the function (the user's own code)."""
    target, _, name = spec.rpartition(":")
    if not target or not name.isidentifier():
        raise ConfigError(f"{spec!r} is not a model factory: write path/to/file.py:function or "
                          "package.module:function (a function returning the model and example inputs).")
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise ConfigError(f"model factory file {target} does not exist.")
        module_spec = importlib.util.spec_from_file_location(f"_torchwork_factory_{path.stem}", path)
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
            raise ConfigError(f"cannot import {target!r} for the model factory {spec!r}: {error}.") from error
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError(f"{target} has no function {name!r}.")
    return factory


def build_from_factory(spec: str) -> dict[str, Any]:
    made = load_factory(spec)()
    if isinstance(made, tuple) and len(made) == 2:
        made = {"model": made[0], "example_inputs": made[1]}
    if not isinstance(made, Mapping) or not {"model", "example_inputs"} <= set(made):
        raise ConfigError(f"the factory {spec} must return {{'model': ..., 'example_inputs': ...}} or a (model, "
                          f"example_inputs) pair; it returned {type(made).__name__}.")
    unknown = set(made) - FACTORY_KEYS
    if unknown:
        raise ConfigError(f"the factory {spec} returned unknown keys {sorted(unknown)}; known: {sorted(FACTORY_KEYS)}.")
    return dict(made)
