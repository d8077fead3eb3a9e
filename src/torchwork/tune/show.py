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

from torchwork.errors import ConfigError


def show(where: str, study: str | None = None) -> str:
    """The trials table of a study, from its folder (its SQLite file, its name) or a storage URL."""
    import optuna

    from torchwork.tune.report import format_table
    from torchwork.tune.storage import default_url, describe_url, open_storage
    from torchwork.tune.study import latest_attempts

    summary = None
    named = describe_url(where)  # what errors print: a password in the URL masked
    folder = Path(where)
    if "://" in where:
        url = where
    elif (folder / "study.db").is_file():
        url = default_url(folder)
        study = study or folder.name
        if (folder / "summary.json").is_file():
            summary = json.loads((folder / "summary.json").read_text())
    else:
        raise ConfigError(f"{named}: neither a study folder (holding study.db) nor a storage URL.")
    storage = open_storage(url)
    names = [s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)]
    if study is None:
        if len(names) != 1:
            raise ConfigError(f"{named} holds {len(names)} studies; name one with --study ({', '.join(names)}).")
        study = names[0]
    if study not in names:
        raise ConfigError(f"no study {study!r} in {named} (studies: {', '.join(names) or 'none'}).")
    loaded = optuna.load_study(study_name=study, storage=storage)
    attempts = latest_attempts(loaded.get_trials(deepcopy=False))
    return f"study {study}\n" + format_table(attempts, summary)
