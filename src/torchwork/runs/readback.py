"""Reading a run folder back, as data: its manifest (JSON only), fields of the expected type or None, its
metrics file, and the few facts every reader needs (recipe, state, the monitored metric).

Nothing here trusts the folder: a manifest may be half-written (a crash mid-write before writes were
atomic, a copy cut short) or edited by hand, so every field is checked for its type where it is read, and
a problem becomes a one-line :class:`~torchwork.errors.ConfigError`, never a traceback.

Example:
    >>> field({"config": {"lr": 0.1}, "seed": "x"}, "config.lr", float), field({"seed": "x"}, "seed", int)
    (0.1, None)
    >>> recipe_of({"command": {"argv": ["/venv/bin/torchwork", "quickstart", "--quick"]}})
    'sentiment'
    >>> recipe_of({"command": {"argv": ["train.py", "--lr", "0.1"]}})
    'train.py'
"""

from __future__ import annotations

import datetime
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_finite_number
from torchwork.paths import MAX_MANIFEST_BYTES as MAX_MANIFEST_BYTES  # where the runs layer's readers find it
from torchwork.runs.folder_files import load_json, open_run_file, read_run_file

MANIFEST = "manifest.json"
MAX_METRICS_BYTES = 256 * 2**20  # a million epochs' lines; more is not a metrics file
LARGEST_INT = 2**63  # a recorded count, seed or id is below this: a larger one is not a reading
TAIL_BYTES = 64 * 1024  # enough for the last epoch's line of metrics.jsonl

# Config entries a recipe keeps for resume (results, not settings): shown as effects, never as causes.
RECORDED_RESULTS = ("baseline", "precision_timing", "precision_chosen")


def read_manifest(run: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of the run folder ``run``, or a ConfigError saying what is wrong with the folder."""
    path = Path(run)
    if not path.exists():
        raise ConfigError(f"{path} does not exist: pass a run folder (RUN_DIR/<timestamp>-<id>); "
                          "`torchwork runs ls RUN_DIR` lists them.")
    if not path.is_dir():
        raise ConfigError(f"{path} is a file, not a run folder: pass the folder that holds manifest.json.")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise ConfigError(f"{path} is not a run folder: it has no {MANIFEST} (a Trainer with run_dir= writes "
                          "RUN_DIR/<timestamp>-<id>/manifest.json); `torchwork runs ls` lists the run folders "
                          "under a directory.")
    return load_manifest_file(manifest_path)


def load_manifest_file(path: Path) -> dict[str, Any]:
    """The manifest at ``path``, read as :mod:`torchwork.runs.folder_files` reads a run's files (a regular
    file inside the run folder, at most 16 MiB, JSON at most 64 levels deep), or a one-line ConfigError."""
    size = path.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise ConfigError(f"{path} is {size / 2**20:.0f} MiB, more than a run manifest can be "
                          f"({MAX_MANIFEST_BYTES >> 20} MiB): it is not one.")
    try:
        data = load_json(read_run_file(path.parent, path.name, MAX_MANIFEST_BYTES), path)
    except json.JSONDecodeError as error:
        # a file cut short ends inside a value: the parser reaches its end, or a string never closes
        ends_early = error.pos >= len(error.doc.rstrip()) - 1 or error.msg.startswith("Unterminated string")
        cut = "half-written (it ends early)" if ends_early else "edited by hand or damaged"
        raise ConfigError(f"{path} is not valid JSON, {cut}: {error.msg} (line {error.lineno}, column "
                          f"{error.colno}). Restore it from a copy, or remove the run folder.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not a run manifest (a JSON object).")
    return data


def field(manifest: Any, dotted: str, kind: type | tuple[type, ...]) -> Any:
    """``manifest["a"]["b"]`` for ``"a.b"`` when every level is a dict and the value is of ``kind``, else None
    (an int is accepted where a float is asked; a bool is never a number; an integer of 2**63 or more, or a
    NaN or infinite float, is no reading: None)."""
    value = manifest
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, int) and abs(value) >= LARGEST_INT) or (isinstance(value, float)
                                                                   and not math.isfinite(value)):
        return None
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and bool not in kinds:
        return None
    return value if isinstance(value, kinds) else None


def recipe_of(manifest: dict[str, Any]) -> str:
    """What made the run: the config's ``recipe``, else the torchwork command's recipe, else the script."""
    named = field(manifest, "config.recipe", str)
    if named:
        return named
    argv = field(manifest, "command.argv", list) or []
    argv = [a for a in argv if isinstance(a, str)]
    for index, word in enumerate(argv[1:], 1):
        rest = argv[index + 1:]
        if word == "quickstart":
            return rest[rest.index("--recipe") + 1] if "--recipe" in rest[:-1] else "sentiment"
        if word in ("train", "tune") and rest and not rest[0].startswith("-"):
            return Path(rest[0]).stem if rest[0].endswith((".yaml", ".yml")) else rest[0]
    if not argv:
        return "unknown"
    return "python -c" if argv[0] == "-c" else Path(argv[0]).name


def parse_time(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _metric_lines(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.splitlines():
        try:
            row = load_json(line, "metrics.jsonl")
        except ValueError:
            continue  # a line cut by a crash (or not JSON, or nested absurdly deep)
        if isinstance(row, dict) and _step(row.get("step")):
            yield row


def _step(value: Any) -> bool:
    """A step a line can be placed at: a finite number below 2**53 (not NaN, Infinity, or 10**30)."""
    return is_finite_number(value) and abs(value) < 2**53


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """Every line of ``metrics.jsonl`` that parses to an object with a step (cut lines are skipped); none
    when the file is missing or refused (not a regular file of the run, over 256 MiB)."""
    try:
        return list(_metric_lines(read_run_file(run, "metrics.jsonl", MAX_METRICS_BYTES)))
    except (OSError, ConfigError):
        return []


def metrics_tail(run: Path) -> Iterator[dict[str, Any]]:
    """The last lines of ``metrics.jsonl`` (its last 64 KiB), newest first, each parsed when reached."""
    try:
        with open_run_file(run, "metrics.jsonl") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES)
    except OSError:
        return iter(())
    if size > TAIL_BYTES:
        data = data.split(b"\n", 1)[-1]  # the first line may start mid-way
    return _metric_lines(b"\n".join(reversed(data.splitlines())))


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
