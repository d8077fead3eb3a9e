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

import traceback
from collections.abc import Callable, Mapping
from typing import Any

from torchwork.errors import ConfigError

FACTORY_KEYS = {"model", "example_inputs", "preprocess", "labels", "softmax", "samples", "targets", "input_names",
                "output_names", "dynamic_length", "max_length", "output"}


def load_factory(spec: str) -> Callable[[], Any]:
    """``file.py:function`` or ``package.module:function`` -> the function (the user's own code)."""
    from torchwork.user_code import load_function

    return load_function(spec, "model factory", "a function returning the model and example inputs")


def build_from_factory(spec: str) -> dict[str, Any]:
    factory = load_factory(spec)
    try:
        made = factory()
    except Exception as error:  # the user's code failed: one line naming it, not a traceback through torchwork
        said = (str(error).splitlines() or [""])[0][:300]
        raise ConfigError(f"the factory {spec} raised {type(error).__name__}: {said}{_user_line(error)}. Fix it "
                          "there; the export starts once the factory returns (model, example_inputs).") from None
    if isinstance(made, tuple) and len(made) == 2:
        made = {"model": made[0], "example_inputs": made[1]}
    if not isinstance(made, Mapping) or not {"model", "example_inputs"} <= set(made):
        raise ConfigError(f"the factory {spec} must return {{'model': ..., 'example_inputs': ...}} or a (model, "
                          f"example_inputs) pair; it returned {type(made).__name__}.")
    unknown = set(made) - FACTORY_KEYS
    if unknown:
        raise ConfigError(f"the factory {spec} returned unknown keys {sorted(unknown)}; known: {sorted(FACTORY_KEYS)}.")
    return dict(made)


def _user_line(error: BaseException) -> str:
    """`` (file.py:12)``: where in the user's code the error was raised, from its traceback's last frame."""
    frames = traceback.extract_tb(error.__traceback__)
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
