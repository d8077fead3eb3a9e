"""The search space: one line of YAML per setting, validated before any trial, and each trial's params drawn
from (seed, trial number) alone.

A setting is a range (``low``, ``high``, optionally ``log: true`` or ``step``) or a list of ``choices``::

    lr: {low: 1.0e-4, high: 0.1, log: true}
    epochs: {choices: [4, 8, 12]}
    max_length: {low: 16, high: 128, step: 16}

A range is an integer range when the setting is an integer (the recipe's field says so) or when ``low``,
``high`` and ``step`` are all integers; otherwise it is a float range.

Trial ``n``'s params are point ``n`` of a scrambled Sobol sequence seeded with ``seed``, mapped onto each
setting (log-uniform, on the step grid, or one of the choices). So they depend on nothing but the seed and
the trial number: a study with one worker and one with eight try the same params, and a re-run from scratch
repeats them (Optuna's samplers draw from the study's history, which depends on which worker asked first).

Example:
    >>> space = Space.from_mapping({"lr": {"low": 1e-4, "high": 0.1, "log": True}, "epochs": {"choices": [4, 8]}})
    >>> params = space.params_for(0, seed=0)
    >>> sorted(params), params == space.params_for(0, seed=0), params == space.params_for(1, seed=0)
    (['epochs', 'lr'], True, False)
    >>> Space.from_mapping({"lr": {"low": 0.1, "high": 0.01}})
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: space: lr: low (0.1) must be below high (0.01).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_finite_number
from torchwork.quoting import quote_value

RANGE_KEYS = ("low", "high", "log", "step")
ENTRY_KEYS = (*RANGE_KEYS, "choices")
MAX_CHOICES = 10_000  # a setting's choices: each is a point of the report's plot and a row of its storage
MAX_GRID_POINTS = 1_000_000  # (high - low) / step: a finer grid is a float range (write no step)
MAX_SETTINGS = 1_000  # Sobol points have at most 21,201 dimensions; a recipe has tens of settings
MAX_SPACE_BYTES = 1 << 20  # a space file: one line per setting; 10,000 choices of text fit many times over


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting of the space: a range (``low``..``high``, ``log``, ``step``) or ``choices``."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    integer: bool = False
    choices: tuple[Any, ...] | None = None

    def value_at(self, u: float) -> Any:
        """The value at ``u`` in [0, 1) of this setting's range (or its choices)."""
        if self.choices is not None:
            return self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
        low, high = float(self.low), float(self.high)  # type: ignore[arg-type]
        if self.log:
            value = math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
            return min(max(int(round(value)), int(low)), int(high)) if self.integer else value
        if self.step is not None:
            points = int(round((high - low) / self.step)) + 1
            value = low + min(int(u * points), points - 1) * self.step
            return int(round(value)) if self.integer else round(value, 12)
        if self.integer:
            points = int(high - low) + 1
            return int(low) + min(int(u * points), points - 1)
        return low + u * (high - low)

    def distribution(self) -> Any:
        """The matching Optuna distribution (what the storage and the dashboard show)."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.choices is not None:
            return CategoricalDistribution(list(self.choices))
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log,  # type: ignore[arg-type]
                                   step=int(self.step or 1))
        return FloatDistribution(float(self.low), float(self.high), log=self.log,  # type: ignore[arg-type]
                                 step=self.step)

    def suggest(self, trial: Any) -> Any:
        """Ask an Optuna trial for this setting (a queued trial answers with its fixed value)."""
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high),  # type: ignore[arg-type]
                                     step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high),  # type: ignore[arg-type]
                                   step=self.step, log=self.log)

    def extremes(self) -> list[Any]:
        """The values a trial can get at the edges (each choice, or low and high)."""
        if self.choices is not None:
            return list(self.choices)
        return [self.value_at(0.0), self.value_at(1.0 - 1e-12)]

    def describe(self) -> dict[str, Any]:
        if self.choices is not None:
            return {"choices": list(self.choices)}
        entry: dict[str, Any] = {"low": self.low, "high": self.high}
        if self.log:
            entry["log"] = True
        if self.step is not None:
            entry["step"] = self.step
        entry["type"] = "int" if self.integer else "float"
        return entry


class Space:
    """The settings to tune, in a canonical (sorted) order."""

    def __init__(self, settings: list[Setting]) -> None:
        self.settings = sorted(settings, key=lambda s: s.name)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.settings]

    @classmethod
    def from_mapping(cls, data: Any, integer_fields: set[str] | None = None, where: str = "space") -> Space:
        """Parse and validate a space; ``integer_fields`` names the settings that are integers (None: a range
        of integers is an integer range)."""
        if not isinstance(data, Mapping) or not data:
            raise ConfigError(f"{where}: a space is a mapping of settings, one per line, e.g. "
                              "'lr: {low: 1.0e-4, high: 0.1, log: true}'.")
        if len(data) > MAX_SETTINGS:
            raise ConfigError(f"{where}: {len(data)} settings, over the {MAX_SETTINGS} a space may have.")
        settings, problems = [], []
        for name, entry in data.items():
            try:
                integer = None if integer_fields is None else str(name) in integer_fields
                settings.append(_setting(str(name), entry, integer))
            except ConfigError as error:
                problems.append(str(error).rstrip("."))
        if problems:
            raise ConfigError(f"{where}: " + "; ".join(problems) + ".")
        return cls(settings)

    def params_for(self, number: int, seed: int) -> dict[str, Any]:
        """Trial ``number``'s params: point ``number`` of the Sobol sequence scrambled with ``seed``."""
        from scipy.stats import qmc

        sobol = qmc.Sobol(d=len(self.settings), scramble=True, seed=_derived_seed(seed, self.names))
        if number:
            sobol.fast_forward(number)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "balance properties ... power of 2": one point at a time
            point = sobol.random(1)[0]
        return {s.name: s.value_at(float(u)) for s, u in zip(self.settings, point)}

    def distributions(self) -> dict[str, Any]:
        return {s.name: s.distribution() for s in self.settings}

    def describe(self) -> dict[str, Any]:
        """The space as plain data (stored with the study, compared when it is run again)."""
        return {s.name: s.describe() for s in self.settings}

    def describe_raw(self) -> dict[str, Any]:
        """The space as its YAML would write it (``from_mapping`` reads it back to the same space)."""
        return {name: {k: v for k, v in entry.items() if k != "type"} for name, entry in self.describe().items()}

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()[:16]


def read_space(path: str | os.PathLike[str], integer_fields: set[str] | None = None) -> Space:
    """A validated space from a YAML file (a one-line error for anything wrong in it), read as data: a
    regular file of at most :data:`MAX_SPACE_BYTES`, aliases refused (:mod:`torchwork.yaml_files`)."""
    from torchwork.yaml_files import read_yaml_file

    file = Path(path)
    if not os.path.lexists(file):
        raise ConfigError(f"space file {file} does not exist (write one setting per line, e.g. "
                          "'lr: {low: 1.0e-4, high: 0.1, log: true}').")
    data = read_yaml_file(file, "search space", MAX_SPACE_BYTES) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"space {file} must hold a mapping of settings (key: value), not {type(data).__name__}.")
    return Space.from_mapping(data, integer_fields, where=f"space {file}")


def check_names(space: Space, fields: list[str], refused: Mapping[str, str]) -> None:
    """Refuse settings the recipe does not have (suggesting the one meant, as ``--set`` does) and those
    the tuner sets itself (``refused``: name -> why)."""
    from torchwork.recipes.config import suggest_setting

    problems = []
    for name in space.names:
        if name in refused:
            problems.append(f"{name!r} cannot be tuned ({refused[name]})")
        elif name not in fields:
            close = suggest_setting(name, fields)
            problems.append(f"unknown setting {name!r}" + (f" (did you mean {close!r}?)" if close else ""))
    if problems:
        raise ConfigError("space: " + "; ".join(problems) + f". Settings: {', '.join(fields)}.")


def _number(name: str, key: str, value: Any) -> float:
    """``value`` as a finite number. Text that reads as one is taken as the recipe configs take it: YAML 1.1 reads
    ``1e-4`` (no dot in the mantissa) as the text '1e-4', which is 0.0001 all the same."""
    given = value
    if isinstance(value, str):
        value = _parsed(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}: {key} must be a number (e.g. 1.0e-4 or 16), got {quote_value(given)}")
    if not is_finite_number(value):
        raise ConfigError(f"{name}: {key} must be a finite number, got {quote_value(given)}")
    return value


def _parsed(text: str) -> Any:
    """``text`` as an int ('16') or a float ('1e-4'), else ``text`` itself."""
    for kind in (int, float):
        try:
            return kind(text.strip())
        except ValueError:  # not this kind of number (or an integer of over 4,300 digits)
            continue
    return text


def _choices(name: str, choices: Any) -> Setting:
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{name}: choices must be a non-empty list, got {quote_value(choices)}")
    if len(choices) > MAX_CHOICES:
        raise ConfigError(f"{name}: {len(choices)} choices, over the {MAX_CHOICES} a setting may have; tune a "
                          "range {low: .., high: ..} instead")
    bad = next((c for c in choices if not isinstance(c, (str, int, float, bool))
                or isinstance(c, float) and not math.isfinite(c)), None)
    if bad is not None:
        raise ConfigError(f"{name}: each choice must be a finite number, text or true/false, got {quote_value(bad)}")
    if len({json.dumps(c) for c in choices}) != len(choices):
        raise ConfigError(f"{name}: choices repeat a value: {quote_value(choices)}")
    return Setting(name, choices=tuple(choices))


def _check_range(name: str, low: float, high: float, log: bool, step: float | None) -> None:
    """A range Optuna and the Sobol mapping can sample: a finite span, a positive log range, a step grid of at
    most :data:`MAX_GRID_POINTS` points that divides it."""
    if not low < high:
        raise ConfigError(f"{name}: low ({low!r}) must be below high ({high!r})")
    if not math.isfinite(float(high) - float(low)):
        raise ConfigError(f"{name}: high - low overflows ({low!r} to {high!r}); narrow the range")
    if log and low <= 0:
        raise ConfigError(f"{name}: a log range needs low > 0, got {low!r}")
    if step is None:
        return
    points = (float(high) - float(low)) / step
    if not points <= MAX_GRID_POINTS:
        raise ConfigError(f"{name}: step {step!r} makes {points:.3g} grid points from {low!r} to {high!r}, over "
                          f"the {MAX_GRID_POINTS:,} allowed; use a coarser step, or no step for a float range")
    if abs(points - round(points)) > 1e-9:
        raise ConfigError(f"{name}: high - low ({high - low:g}) must be a multiple of step ({step:g})")


def _setting(name: str, entry: Any, integer_field: bool | None) -> Setting:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{name}: write a range {{low: .., high: ..}} or {{choices: [..]}}, got {quote_value(entry)}")
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), ENTRY_KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{name}: unknown key {quote_value(unknown[0])}{hint}; use {', '.join(ENTRY_KEYS)}")
    if "choices" in entry:
        if set(entry) - {"choices"}:
            raise ConfigError(f"{name}: choices cannot be combined with {', '.join(sorted(set(entry) - {'choices'}))}")
        return _choices(name, entry["choices"])
    if "low" not in entry or "high" not in entry:
        raise ConfigError(f"{name}: a range needs both low and high (or give choices: [..])")
    low, high = _number(name, "low", entry["low"]), _number(name, "high", entry["high"])
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{name}: log must be true or false, got {quote_value(log)}")
    step = entry.get("step")
    if step is not None:
        step = _number(name, "step", step)
        if step <= 0:
            raise ConfigError(f"{name}: step must be > 0, got {step!r}")
        if log:
            raise ConfigError(f"{name}: use either log or step, not both")
    given = (low, high, *([step] if step is not None else []))
    integer = integer_field if integer_field is not None else all(isinstance(v, int) for v in given)
    if integer_field and not all(float(v).is_integer() for v in (low, high, *([step] if step else []))):
        raise ConfigError(f"{name} is an integer setting: low, high and step must be integers")
    _check_range(name, low, high, log, step)
    if integer:
        low, high, step = int(low), int(high), int(step) if step is not None else None
    return Setting(name, low=low, high=high, log=log, step=step, integer=integer)


def _derived_seed(seed: int, names: list[str]) -> int:
    """The Sobol scrambling seed: from the study's seed and the settings' names (so a space with one more
    setting draws afresh rather than shifting every setting)."""
    digest = hashlib.sha256(json.dumps([int(seed), names]).encode()).digest()
    return int.from_bytes(digest[:8], "little")
