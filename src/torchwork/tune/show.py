"""``torchwork tune show STUDY_FOLDER_OR_STORAGE_URL [--study NAME]``: the trials table in the terminal.

Example:
    >>> show("/nonexistent/study")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: /nonexistent/study: neither a study folder (holding study.db) nor a storage URL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError

MAX_SUMMARY_BYTES = 1 << 20


def show(where: str, study: str | None = None) -> str:
    """The trials table of a study, from its folder (its SQLite file, its name) or a storage URL; a study
    file that cannot be read (truncated, overwritten, a table dropped, values of the wrong kind) is one
    ConfigError saying so."""
    from torchwork.tune.storage import describe_url

    summary = None
    named = describe_url(where)  # what errors print: a password in the URL masked
    folder = Path(where)
    if "://" in where:
        url = where
        sqlite_file = _sqlite_file(where)
        if sqlite_file is not None:  # read-only: opening a missing file through Optuna created an empty study
            if not sqlite_file.is_file():
                raise ConfigError(f"{named}: no such study file ({sqlite_file}). Give the study folder (runs/tune/"
                                  "NAME) or the URL of an existing storage.")
            _check_sqlite(sqlite_file, named)
    elif (folder / "study.db").is_file():
        from torchwork.tune.storage import default_url

        url = default_url(folder)
        study = study or folder.name
        summary = _summary(folder / "summary.json")
        _check_sqlite(folder / "study.db", named)
    else:
        raise ConfigError(f"{named}: neither a study folder (holding study.db) nor a storage URL.")
    try:
        return _table(url, named, study, summary)
    except ConfigError:
        raise
    except Exception as error:  # the storage's content is data: whatever it holds, one line
        what = " ".join(str(error).split())[:200] or type(error).__name__
        raise ConfigError(f"{named}: the study storage cannot be read ({type(error).__name__}: "
                          f"{describe_url(what)}); it is damaged or not an Optuna storage. Restore study.db from "
                          "a copy, or run the study again under another --study name.") from None


# Optuna's tables that a study's trials table reads: one missing is a damaged file (opening it through Optuna
# would create the table afresh, empty, and show trials without their scores)
TABLES = ("studies", "study_directions", "study_user_attributes", "trials", "trial_values", "trial_params",
          "trial_user_attributes", "trial_system_attributes", "trial_intermediate_values")


def _sqlite_file(url: str) -> Path | None:
    """The file an ``sqlite:///path`` URL names (None for another storage, or SQLite in memory)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix):] in ("", ":memory:"):
        return None
    return Path(url[len(prefix):].split("?", 1)[0])


def _check_sqlite(path: Path, named: str) -> None:
    """A study file checked read-only before Optuna opens it (and writes to it): an SQLite database whose
    pages are intact (``PRAGMA quick_check``) and that holds Optuna's tables."""
    import sqlite3

    problem = None
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            missing = [t for t in TABLES if t not in tables]
            if missing:
                problem = f"it lacks Optuna's table{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
            else:
                found = [row[0] for row in connection.execute("PRAGMA quick_check(5)")]
                problem = None if found == ["ok"] else f"its pages fail SQLite's check ({'; '.join(map(str, found))})"
        finally:
            connection.close()
    except sqlite3.Error as error:
        problem = f"SQLite cannot read it ({error})"
    if problem:
        raise ConfigError(f"{named}: study.db is damaged: {problem}. Restore it from a copy, or run the study "
                          "again under another --study name.")


def _summary(path: Path) -> dict[str, Any] | None:
    """The study's ``summary.json`` when it is readable and well formed (its best line), else None."""
    from torchwork.paths import read_regular

    try:
        data = json.loads(read_regular(path, MAX_SUMMARY_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    fields = (("best_trial", int), ("objective", str), ("best_value", (int, float)), ("best_params", dict))
    if not isinstance(data, dict) or any(not isinstance(data.get(k), kind) or isinstance(data.get(k), bool)
                                         for k, kind in fields):
        return None
    return data


def _table(url: str, named: str, study: str | None, summary: dict[str, Any] | None) -> str:
    import optuna

    from torchwork.tune.report import format_table
    from torchwork.tune.storage import open_storage
    from torchwork.tune.study import latest_attempts

    storage = open_storage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    if study is None:
        if not names:
            raise ConfigError(f"{named} holds no study: run one with torchwork tune first.")
        if len(names) != 1:
            raise ConfigError(f"{named} holds {len(names)} studies; name one with --study ({', '.join(names)}).")
        study = names[0]
    if study not in names:
        raise ConfigError(f"no study {study!r} in {named} (studies: {', '.join(names) or 'none'}).")
    loaded = optuna.load_study(study_name=study, storage=storage)
    attempts = latest_attempts(loaded.get_trials(deepcopy=False))
    return f"study {study}\n" + format_table(attempts, summary)
