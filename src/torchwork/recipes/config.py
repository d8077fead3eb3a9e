"""Recipe configurations: dataclasses filled from YAML files and ``--set key=value`` overrides, with
errors that name the bad key or value.

Example:
    >>> from dataclasses import dataclass
    >>> from torchwork.recipes.config import apply_overrides
    >>> @dataclass
    ... class Config:
    ...     epochs: int = 3
    ...     lr: float = 1e-3
    >>> apply_overrides(Config(), {"epochs": "5"})
    Config(epochs=5, lr=0.001)
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from torchwork.errors import ConfigError

C = TypeVar("C")


def _convert(name: str, value: Any, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            return None
        return _convert(name, value, options[0])
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}.")
        inner = typing.get_args(annotation)[0] if typing.get_args(annotation) else str
        items = [_convert(name, v, inner) for v in value]
        return tuple(items) if origin is tuple else items
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
        raise ConfigError(f"{name}: expected true or false, got {value!r}.")
    if annotation in (int, float):
        try:
            converted = annotation(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected {annotation.__name__}, got {value!r}.") from None
        if annotation is int and isinstance(value, float) and value != converted:
            raise ConfigError(f"{name}: expected an integer, got {value!r}.")
        return converted
    if annotation is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{name}: expected text, got {value!r}.")
        return str(value)
    return value


def apply_overrides(config: C, values: dict[str, Any]) -> C:
    """A copy of ``config`` with ``values`` set, converted to each field's type and validated."""
    hints = typing.get_type_hints(type(config))
    fields = {f.name for f in dataclasses.fields(config)}
    changes = {}
    for key, value in values.items():
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown setting {key!r} for {type(config).__name__}.{hint} "
                              f"Settings: {', '.join(sorted(fields))}.")
        changes[key] = _convert(key, value, hints[key])
    updated = dataclasses.replace(config, **changes)
    check = getattr(updated, "validate", None)
    if callable(check):
        check()
    return updated


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``."""
    values = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: write it as key=value, e.g. --set epochs=5.")
        values[key.strip()] = value.strip()
    return values


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A YAML mapping from ``path``, with a clear error for anything else."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist.")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings (key: value), not {type(data).__name__}.")
    return data
