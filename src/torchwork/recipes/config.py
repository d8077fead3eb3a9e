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

import contextlib
import dataclasses
import difflib
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from torchwork.errors import ConfigError

C = TypeVar("C")
EXPORT_FORMATS = ("pt2", "onnx", "torchscript")
COMPILE_CHOICES: dict[str, bool | str] = {"auto": "auto", "true": True, "on": True, "yes": True, "false": False, "off": False, "no": False}

# Names people bring from other libraries -> torchwork's setting; suggested when the setting exists.
ALIASES = {
    "learning_rate": "lr", "learningrate": "lr", "lr_max": "lr", "max_lr": "lr",
    "weight_decay": "l2", "wd": "l2", "l2_penalty": "l2",
    "num_epochs": "epochs", "max_epochs": "epochs", "n_epochs": "epochs", "epoch": "epochs",
    "bs": "batch_size", "batch": "batch_size", "batchsize": "batch_size", "train_batch_size": "batch_size",
    "num_threads": "threads", "n_threads": "threads", "workers": "threads",
    "max_len": "max_length", "seq_len": "max_length", "max_seq_length": "max_length",
    "vocab_size": "max_vocab", "max_features": "max_vocab", "min_df": "min_freq",
    "grad_clip": "clip_grad_norm", "max_grad_norm": "clip_grad_norm", "gradient_clip_val": "clip_grad_norm",
    "dtype": "precision", "amp": "precision", "mixed_precision": "precision",
    "random_seed": "seed", "output_dir": "run_dir", "out_dir": "run_dir", "early_stopping_patience": "patience",
    "formats": "export_formats", "n_rows": "subset", "limit": "subset",
}


def suggest_setting(key: str, fields: list[str]) -> str | None:
    """The setting a mistyped or foreign ``key`` most likely means: a known alias, else the closest name.

    Example:
        >>> suggest_setting("learning_rate", ["epochs", "lr"]), suggest_setting("epohcs", ["epochs", "lr"])
        ('lr', 'epochs')
        >>> suggest_setting("learing_rate", ["epochs", "lr"])
        'lr'
    """
    normal = key.strip().lower().replace("-", "_")
    if normal in fields:
        return normal
    if ALIASES.get(normal) in fields:
        return ALIASES[normal]
    close = difflib.get_close_matches(normal, fields, n=1)
    if close:
        return close[0]
    # a misspelt foreign name: "learing_rate" is closest to the alias "learning_rate", which means "lr"
    known = [alias for alias, field in ALIASES.items() if field in fields]
    close = difflib.get_close_matches(normal, known, n=1, cutoff=0.8)
    return ALIASES[close[0]] if close else None


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
        if isinstance(value, bool):  # YAML's yes / true are not numbers
            raise ConfigError(f"{name}: expected {annotation.__name__}, got {value!r}.")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{name}: expected {annotation.__name__}, got {value!r}.") from None
        if not math.isfinite(number):
            raise ConfigError(f"{name}: expected a finite number, got {value!r}.")
        if annotation is float:
            return number
        if isinstance(value, int):
            return value
        with contextlib.suppress(ValueError):
            return int(value)  # "12" exactly, even past float precision
        if not number.is_integer():
            raise ConfigError(f"{name}: expected an integer, got {value!r}.")
        return int(number)
    if annotation is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{name}: expected text, got {value!r}.")
        return str(value)
    return value


def apply_overrides(config: C, values: dict[str, Any]) -> C:
    """A copy of ``config`` with ``values`` set, converted to each field's type and validated."""
    hints = typing.get_type_hints(type(config))
    fields = {f.name for f in dataclasses.fields(config)}
    changes, problems = {}, []
    for key, value in values.items():
        if key not in fields:
            close = suggest_setting(key, sorted(fields))
            hint = f" Did you mean {close!r}?" if close else ""
            raise ConfigError(f"unknown setting {key!r} for {type(config).__name__}.{hint} "
                              f"Settings: {', '.join(sorted(fields))}.")
        try:
            changes[key] = _convert(key, value, hints[key])
        except ConfigError as error:
            problems.append(str(error).rstrip("."))
    if problems:  # every bad value at once, each with its own name
        raise ConfigError("; ".join(problems) + ".")
    updated = dataclasses.replace(config, **changes)
    check = getattr(updated, "validate", None)
    if callable(check):
        check()
    return updated


def check_settings(config: Any, *, at_least: dict[str, float] | None = None,
                   above: dict[str, float] | None = None, one_of: dict[str, tuple[str, ...]] | None = None,
                   zero_or_at_least: dict[str, tuple[int, str]] | None = None,
                   some_of: dict[str, tuple[str, ...]] | None = None) -> None:
    """Raise one ConfigError naming each setting out of its range (and only those).

    Example:
        >>> from types import SimpleNamespace
        >>> check_settings(SimpleNamespace(epochs=0, lr=0.1), at_least={"epochs": 1}, above={"lr": 0})
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: epochs=0: must be >= 1.
    """
    problems = []
    for name, low in (at_least or {}).items():
        value = getattr(config, name)
        if value is not None and value < low:
            problems.append(f"{name}={value!r}: must be >= {low:g}")
    for name, low in (above or {}).items():
        value = getattr(config, name)
        if value is not None and not value > low:
            problems.append(f"{name}={value!r}: must be > {low:g}")
    for name, choices in (one_of or {}).items():
        value = getattr(config, name)
        if value not in choices:
            problems.append(f"{name}={value!r}: use {', '.join(choices)}")
    for name, (low, why) in (zero_or_at_least or {}).items():
        value = getattr(config, name)
        if value < 0 or 0 < value < low:
            problems.append(f"{name}={value!r}: use 0 (all rows) or >= {low} ({why})")
    for name, choices in (some_of or {}).items():
        value = list(getattr(config, name))
        if not value or set(value) - set(choices):
            problems.append(f"{name}={value}: choose one or more of {', '.join(choices)}")
    if problems:
        raise ConfigError("; ".join(problems) + ".")


def compile_choice(value: Any) -> bool | str:
    """A recipe's ``compile`` setting as the Trainer's ``compile=``: ``True``, ``False`` or ``"auto"``.

    Example:
        >>> compile_choice("auto"), compile_choice("True"), compile_choice("off")
        ('auto', True, False)
        >>> compile_choice("fast")
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: compile='fast': use auto, true or false.
    """
    choice = COMPILE_CHOICES.get(str(value).strip().lower())
    if choice is None:
        raise ConfigError(f"compile={value!r}: use auto, true or false.")
    return choice


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
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; give the YAML file inside it "
                          f"(e.g. {path / 'config.yaml'}).")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist.")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings (key: value), not {type(data).__name__}.")
    return data
