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
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from torchwork.errors import ConfigError
from torchwork.quoting import quote_value

ATTR = "torchwork"  # the study's user attribute holding what it tunes
# A study's most trials. Every trial is queued (one storage transaction each, 2-20 ms) before any runs, so 10,000
# take up to a few minutes and about 3 MB of SQLite; and each trial is a training run: 10,000 runs of even a
# minute each are a week of one worker, more than a search of a few settings needs.
MAX_TRIALS = 10_000
# Workers per usable CPU: each worker is a process training one trial at a time with floor(cores / workers)
# threads (at least 1); past a few per CPU they only wait for the cores and hold memory (a torch process each).
# MIN_WORKERS_CAP: a small machine may still run that many, e.g. trials that wait on a GPU or a disk.
WORKERS_PER_CPU = 4
MIN_WORKERS_CAP = 8
QUEUE_NOTE_S = 2.0  # queueing that takes longer than this says how far it is, every this many seconds


def check_study_size(trials: int, workers: int, cpus: int | None = None) -> None:
    """A :class:`ConfigError` for ``--trials`` over :data:`MAX_TRIALS` or ``--workers`` over
    :data:`WORKERS_PER_CPU` per usable CPU (``cpus``; default: :func:`torchwork.threads.usable_cpus`), or
    :data:`MIN_WORKERS_CAP` if more: checked before the storage is created.

    Example:
        >>> check_study_size(trials=16, workers=8, cpus=1)
        >>> check_study_size(trials=16, workers=13, cpus=3)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --workers 13: over the 12 this machine can run (4 per usable CPU, at least 8; 3 usable): each worker is a process training a trial, and more only wait for the cores and hold memory; give --workers 12 or fewer (3 gives each a core).
    """
    if trials > MAX_TRIALS:
        raise ConfigError(f"--trials {quote_value(trials)}: over the {MAX_TRIALS:,} a study may have (each is queued in the "
                          f"storage before any runs, and each is a training run); give --trials {MAX_TRIALS} or "
                          "fewer.")
    if cpus is None:
        from torchwork.threads import usable_cpus

        cpus = usable_cpus()
    most = max(MIN_WORKERS_CAP, WORKERS_PER_CPU * cpus)
    if workers > most:
        raise ConfigError(f"--workers {quote_value(workers)}: over the {most} this machine can run ({WORKERS_PER_CPU} per usable "
                          f"CPU, at least {MIN_WORKERS_CAP}; {cpus} usable): each worker is a process training a "
                          "trial, and more only wait for the cores and hold memory; give --workers "
                          f"{most} or fewer ({cpus} gives each a core).")


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


def queue_missing(study: Any, space: Any, seed: int, trials: int, say: Callable[[str], Any] | None = None) -> int:
    """Queue trials 0 .. ``trials``-1 that the study does not hold yet; returns how many were queued. Queueing
    that takes more than :data:`QUEUE_NOTE_S` says how far it is (``say``; default: a line on stderr)."""
    have = {t.user_attrs.get("trial") for t in study.get_trials(deepcopy=False)}
    missing = [n for n in range(trials) if n not in have]
    say = say or _to_stderr
    started = noted = time.monotonic()
    for done, number in enumerate(missing, 1):
        study.enqueue_trial(space.params_for(number, seed), user_attrs={"trial": number, "attempt": 0})
        now = time.monotonic()
        if now - noted >= QUEUE_NOTE_S and done < len(missing):
            say(f"tune: queued {done:,} of {len(missing):,} trials in the study's storage (every trial is queued "
                "before any runs)")
            noted = now
    if noted > started:
        say(f"tune: queued {len(missing):,} trials in {time.monotonic() - started:.0f} s")
    return len(missing)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
