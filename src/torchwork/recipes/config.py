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
from torchwork.quoting import quote_value

C = TypeVar("C")
FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32
# Upper bounds of the recipes' settings (check_settings' at_most), far past any useful value and short of
# where the arithmetic breaks: a learning rate or L2 penalty of 10 is already one no model here trains with
# (the defaults are 3e-2 and 3.5e-5; Adam moves each weight by about lr a step), while 1e30 trains to nan
# and 1e308 overflows float32 inside the optimizer.
MAX_LR = 10.0
MAX_L2 = 10.0
MAX_CLIP_NORM = 1e6  # a gradient norm that large never clips: effectively off
MAX_BATCH_SIZE = 2**20  # a million rows a batch; past it the loaders refuse (and islice overflows at 2**63)
MAX_EPOCHS = 10_000  # also the cap of the patience counted in epochs
MAX_ROWS = 10**9  # rows or words to keep or require (subset, min_freq, max_vocab, ...): more than held in memory
MAX_TOKENS = 2**20  # tokens of one text
MAX_VERIFY_ROUNDS = 1000  # each round costs about a second
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
        except OverflowError:  # an integer past what a float holds
            raise ConfigError(f"{name}: {quote_value(value)} is too large; use a number of a sensible size.") from None
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: expected {annotation.__name__}, got {quote_value(value)}.") from None
        if not math.isfinite(number):
            raise ConfigError(f"{name}: expected a finite number, got {quote_value(value)}.")
        if annotation is float:
            if abs(number) > FLOAT32_MAX:  # the tensors it reaches are float32: it would be inf there
                raise ConfigError(f"{name}: {quote_value(value)} is past what float32 holds (about 3.4e38); use a "
                                  "number of a sensible size.")
            return number
        return _whole(name, value, number)
    if annotation is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{name}: expected text, got {value!r}.")
        return str(value)
    return value


def _whole(name: str, value: Any, number: float) -> int:
    """``value`` (already read as the finite float ``number``) as an integer setting: an int, a whole float
    (2.0 is 2) or text such as "12" (exactly, even past float precision) or "1e3"; a fraction is refused,
    not truncated (``seed: 1.5`` is not seed 1), and so is a number past 64 bits, which no tensor holds."""
    whole: int | None = value if isinstance(value, int) else None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            whole = int(value)
    if whole is None:
        if not number.is_integer():
            raise ConfigError(f"{name}: expected an integer, got {quote_value(value)}; give a whole number.")
        whole = int(number)
    if not -(2**63) <= whole < 2**63:
        raise ConfigError(f"{name}: {quote_value(value)} is too large for an integer setting (at most 2**63 - 1); use "
                          "a number of a sensible size.")
    return whole


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


def _bound(number: float) -> str:
    """A bound in a message: 1048576, not 1.04858e+06."""
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e16 else f"{number:g}"


def check_quantize_formats(config: Any) -> None:
    """A ConfigError when ``config.quantize`` asks for INT8, which is made from the ONNX variant, and
    ``config.export_formats`` has no onnx: the export found it only after all the training.

    Example:
        >>> from types import SimpleNamespace
        >>> check_quantize_formats(SimpleNamespace(quantize=True, export_formats=("pt2",)))
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: quantize=true makes the INT8 variant of the ONNX model, and export_formats=['pt2'] has no onnx: add it (export_formats=onnx,pt2) or set quantize=false.
    """
    if config.quantize and "onnx" not in config.export_formats:
        raise ConfigError(f"quantize=true makes the INT8 variant of the ONNX model, and export_formats="
                          f"{list(config.export_formats)} has no onnx: add it (export_formats=onnx,pt2) or set "
                          "quantize=false.")


def check_settings(config: Any, *, at_least: dict[str, float] | None = None,
                   above: dict[str, float] | None = None, at_most: dict[str, float] | None = None,
                   one_of: dict[str, tuple[str, ...]] | None = None,
                   zero_or_at_least: dict[str, tuple[int, str] | tuple[int, str, str]] | None = None,
                   some_of: dict[str, tuple[str, ...]] | None = None) -> None:
    """Raise one ConfigError naming each setting out of its range (and only those, each once).

    ``zero_or_at_least`` maps a setting to ``(low, why)`` or ``(low, what 0 means, why)`` (0 means "all
    rows" unless told). A ``seed`` the config has is checked too, as every seed is
    (:func:`torchwork.seeding.seed_problem`: an integer in ``[0, 2**32)``).

    Example:
        >>> from types import SimpleNamespace
        >>> check_settings(SimpleNamespace(epochs=0, lr=0.1), at_least={"epochs": 1}, above={"lr": 0})
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: epochs=0: must be >= 1.
        >>> check_settings(SimpleNamespace(lr=1e30, seed=-1), at_least={"seed": 0}, at_most={"lr": 10})
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: seed=-1: must be >= 0; lr=1e+30: must be <= 10.
    """
    from torchwork.seeding import seed_problem

    problems: dict[str, str] = {}  # one problem a setting, in the order found
    seed = getattr(config, "seed", None)
    if seed is not None and seed_problem(seed) is not None:
        problems["seed"] = str(seed_problem(seed))
    found = [(name, f"must be >= {_bound(low)}") for name, low in (at_least or {}).items()
             if getattr(config, name) is not None and getattr(config, name) < low]
    found += [(name, f"must be > {_bound(low)}") for name, low in (above or {}).items()
              if getattr(config, name) is not None and not getattr(config, name) > low]
    found += [(name, f"must be <= {_bound(high)}") for name, high in (at_most or {}).items()
              if getattr(config, name) is not None and getattr(config, name) > high]
    found += [(name, f"use {', '.join(choices)}") for name, choices in (one_of or {}).items()
              if getattr(config, name) not in choices]
    for name, (low, *words) in (zero_or_at_least or {}).items():
        zero, why = (words[0], words[1]) if len(words) == 2 else ("all rows", words[0])
        value = getattr(config, name)
        if value < 0 or 0 < value < low:
            found.append((name, f"use 0 ({zero}) or >= {low} ({why})"))
    for name, what in found:
        problems.setdefault(name, f"{name}={quote_value(getattr(config, name))}: {what}")
    for name, choices in (some_of or {}).items():
        value = list(getattr(config, name))
        if not value or set(value) - set(choices):
            problems.setdefault(name, f"{name}={value}: choose one or more of {', '.join(choices)}")
    if problems:
        raise ConfigError("; ".join(problems.values()) + ".")


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
    """A YAML mapping from ``path``, read as data (:func:`torchwork.yaml_files.read_yaml_file`: a bounded
    regular file, aliases refused), with a one-line error for anything else."""
    from torchwork.yaml_files import read_yaml_file

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; give the YAML file inside it "
                          f"(e.g. {path / 'config.yaml'}).")
    data = read_yaml_file(path, "config file") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings (key: value), not {type(data).__name__}.")
    return data
