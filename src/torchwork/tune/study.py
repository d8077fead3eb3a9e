"""A study in its storage: created once, checked each time it is run again, and its trials queued.

Every trial number 0 .. N-1 is queued up front (Optuna's ``enqueue_trial``) with its params from
:meth:`Space.params_for`, so a worker never samples: it claims the lowest waiting trial (Optuna's
WAITING -> RUNNING transition, which one worker wins). The tuner's trial number is the ``trial`` user
attribute; a killed attempt is failed and queued again under the same number (``attempt`` + 1), so Optuna's
own trial numbers can run ahead of the tuner's.

Example:
    >>> import optuna
    >>> from torchwork.tune.space import Space
    >>> study = optuna.create_study(direction="maximize")
    >>> space = Space.from_mapping({"lr": {"low": 0.001, "high": 0.1, "log": True}})
    >>> queue_missing(study, space, seed=0, trials=3)
    3
    >>> queue_missing(study, space, seed=0, trials=4)    # a rerun asking for more queues only the rest
    1
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from torchwork.errors import ConfigError

ATTR = "torchwork"  # the study's user attribute holding what it tunes


def study_record(target: Any, space: Any, seed: int) -> dict[str, Any]:
    """What makes a study this study: a rerun with another of these is refused."""
    return {"objective": target.objective["name"], "direction": target.objective["direction"],
            "space": space.describe(), "seed": seed, "base": target.describe()}


def open_study(storage: Any, name: str, record: dict[str, Any]) -> Any:
    """Create the study, or load it and check it tunes the same thing the same way."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction = record["direction"]
    study = optuna.create_study(storage=storage, study_name=name, direction=direction, load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise ConfigError(f"study {name!r} exists with direction {study.direction.name.lower()}, not {direction}; "
                          "give another --study name.")
    existing = study.user_attrs.get(ATTR)
    if existing is None:
        if study.trials:
            raise ConfigError(f"study {name!r} exists in the storage but was not made by torchwork tune; "
                              "give another --study name.")
        study.set_user_attr(ATTR, json.loads(json.dumps(record)))
        return study
    for key, what in (("objective", "objective"), ("space", "space"), ("seed", "seed"), ("base", "recipe and --set")):
        if existing.get(key) != json.loads(json.dumps(record[key])):
            raise ConfigError(f"study {name!r} exists with another {what} ({_short(existing.get(key))}); run it "
                              f"with the same one to continue it, or give another --study name.")
    return study


def queue_missing(study: Any, space: Any, seed: int, trials: int) -> int:
    """Queue trials 0 .. ``trials``-1 that the study does not hold yet; returns how many were queued."""
    have = {t.user_attrs.get("trial") for t in study.get_trials(deepcopy=False)}
    missing = [n for n in range(trials) if n not in have]
    for number in missing:
        study.enqueue_trial(space.params_for(number, seed), user_attrs={"trial": number, "attempt": 0})
    return len(missing)


def latest_attempts(trials: Iterable[Any]) -> dict[int, Any]:
    """Each tuner trial number's latest attempt (the one that counts)."""
    latest: dict[int, Any] = {}
    for trial in trials:
        number = trial.user_attrs.get("trial")
        if number is None or trial.user_attrs.get("duplicate"):
            continue
        if number not in latest or trial._trial_id > latest[number]._trial_id:  # unique; numbers can repeat
            latest[number] = trial
    return dict(sorted(latest.items()))


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."
