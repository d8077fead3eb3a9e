"""``torchwork tune``: validate everything, open (or continue) the study, run K workers, report.

Example (the checks that come before anything is written):
    >>> threads_per_worker(workers=2, cores=2), threads_per_worker(workers=3, cores=2)
    (1, 1)
    >>> check_numbers(trials=0, workers=1, timeout=None)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --trials 0: must be a whole number >= 1 (the study's total number of trials).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.files import write_json
from torchwork.finite import is_count, is_finite_number
from torchwork.quoting import quote_value
from torchwork.tune.results import is_final


@dataclasses.dataclass
class TuneOptions:
    """Everything ``torchwork tune`` takes (``storage`` None: the embedded SQLite file in the study folder).

    ``target`` is a recipe or its YAML config; with ``metric`` set it is a user's objective instead
    (``file.py:function`` or ``module:function``, see :func:`tune_objective`), its study under ``run_dir``."""

    target: str
    space: str | Mapping[str, Any]
    trials: int
    workers: int = 1
    storage: str | None = None
    study: str | None = None
    seed: int = 0
    pruner: str = "percentile"
    timeout: float | None = None
    settings: list[str] = dataclasses.field(default_factory=list)
    final: bool = True  # after the trials: the defaults' score, and the best trial rerun for its test score
    heartbeat_s: int = 5
    grace_s: int = 30
    metric: str | None = None  # a user's objective: the Trainer's per-epoch metric it returns and is pruned on
    direction: str = "maximize"
    run_dir: str = "runs"


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """floor(cores / workers), at least 1."""
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    return max(1, cores // workers)


def check_numbers(trials: int, workers: int, timeout: float | None) -> None:
    if not is_count(trials, 1, math.inf):  # a fraction was a TypeError; the ceiling is check_study_size's
        raise ConfigError(f"--trials {quote_value(trials)}: must be a whole number >= 1 (the study's total number "
                          "of trials).")
    if not is_count(workers, 1, math.inf):  # True was one worker
        raise ConfigError(f"--workers {quote_value(workers)}: must be a whole number >= 1.")
    from torchwork.tune.study import check_study_size

    check_study_size(trials, workers)  # the Python API as the command line: before the storage is created
    if timeout is not None and not (is_finite_number(timeout) and timeout > 0):
        raise ConfigError(f"--timeout {quote_value(timeout)}: must be a positive number of seconds.")


def check_liveness(heartbeat_s: Any, grace_s: Any) -> None:
    """How often a trial says it is alive and how long a silent one has before it is retried: whole seconds,
    checked before the storage is opened (0 and -1 reached optuna's storage, NaN was taken)."""
    for name, value, most in (("heartbeat_s", heartbeat_s, 3600), ("grace_s", grace_s, 86_400)):
        if not is_count(value, 1, most):
            raise ConfigError(f"{name}={quote_value(value)}: whole seconds from 1 to {most:,}.")


def prepare(options: TuneOptions) -> dict[str, Any]:
    """Every check that needs no storage, then the storage and the study; nothing is written before the
    checks pass. Returns what the run needs (target, space, study, folder, url)."""
    from torchwork.tune.pruning import make_pruner
    from torchwork.tune.space import Space, read_space
    from torchwork.tune.storage import check_url, default_url, sqlite_path
    from torchwork.tune.study import open_study, queue_missing, study_record

    check_numbers(options.trials, options.workers, options.timeout)
    check_liveness(options.heartbeat_s, options.grace_s)
    target = make_target(options)
    if isinstance(options.space, Mapping):
        space, stem = Space.from_mapping(dict(options.space), target.integer_fields), "space"
    else:
        space, stem = read_space(options.space, target.integer_fields), Path(options.space).stem
    target.check_space(space)
    make_pruner(options.pruner)
    if options.storage is not None:
        check_url(options.storage)
    name = options.study or f"{target.name}-{stem}"
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(f"--study {name!r}: use letters, digits, '-', '_' and '.' only (it names a folder).")
    folder = target.run_dir / "tune" / name
    url = options.storage or default_url(folder)
    created = not folder.exists()
    if sqlite_path(url) is not None:
        folder.mkdir(parents=True, exist_ok=True)
    try:
        storage = _open(url, options)
        study = open_study(storage, name, study_record(target, space, options.seed))
    except ConfigError:
        if created and folder.exists() and sqlite_path(url) is not None:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)  # a refused study leaves nothing behind
        raise
    folder.mkdir(parents=True, exist_ok=True)
    queued = queue_missing(study, space, options.seed, options.trials)
    requeue_lost(study)
    from torchwork.tune.worker import SPEC

    epochs = [getattr(target.config, "epochs", None), *(v for s in space.settings if s.name == "epochs"
                                                         for v in s.extremes())]
    max_epochs = max((int(e) for e in epochs if e is not None), default=None)  # None: Hyperband's "auto"
    write_json(folder / SPEC, {"study": name, "base": target.worker_base(), "space": space.describe_raw(),
                               "seed": options.seed, "pruner": options.pruner, "max_epochs": max_epochs, "trials": options.trials,
                               "heartbeat_s": options.heartbeat_s, "grace_s": options.grace_s})
    return {"target": target, "space": space, "study": study, "folder": folder, "url": url, "queued": queued}


def make_target(options: TuneOptions) -> Any:
    """The recipe, or (``options.metric`` set) the user's objective, the study tunes."""
    if options.metric is not None:
        from torchwork.tune.objective import ObjectiveTarget

        if options.settings:
            raise ConfigError("settings (--set) are a recipe's; a user's objective takes its own from trial.params.")
        return ObjectiveTarget(options.target, options.metric, options.direction, options.run_dir, options.seed)
    from torchwork.tune.target import RecipeTarget

    return RecipeTarget(options.target, options.settings, seed=options.seed)


def _open(url: str, options: TuneOptions) -> Any:
    from torchwork.tune.recovery import queue_retry
    from torchwork.tune.storage import open_storage

    return open_storage(url, options.heartbeat_s, options.grace_s, stale_callback=queue_retry)


def requeue_lost(study: Any) -> None:
    """A killed attempt whose retry was never queued (the process died in between): queue it now."""
    from torchwork.tune.recovery import queue_retry
    from torchwork.tune.study import latest_attempts

    for frozen in latest_attempts(study.get_trials(deepcopy=False)).values():
        if frozen.state.name == "FAIL" and "error" not in frozen.user_attrs:
            queue_retry(study, frozen)


# The study's command line, handed to its workers: each trial's run records it as the command that made it, so
# that `torchwork resume TRIAL_RUN` runs the study again (which continues that trial from its checkpoint).
COMMAND_ENV = "TORCHWORK_TUNE_COMMAND"


def start_worker(folder: Path, url: str, threads: int, index: int, quiet: bool,
                 deadline: float | None) -> subprocess.Popen:
    """One worker process, its thread count in its environment before torch starts."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TORCHWORK_TUNE_THREADS": str(threads), "TORCHWORK_TUNE_STORAGE": url,
           "TORCHWORK_TUNE_WORKER": str(index), COMMAND_ENV: json.dumps(sys.argv)}
    env.pop("TORCHWORK_RESUME", None)
    if deadline is not None:
        env["TORCHWORK_TUNE_DEADLINE"] = repr(deadline)
    output: Any = None
    if quiet:  # several workers: each one's own output (the engine's progress) goes to its log
        logs = folder / "workers"
        logs.mkdir(exist_ok=True)
        output = open(logs / f"{index}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "torchwork.tune.worker", str(folder)], env=env,
                            stdout=output, stderr=subprocess.STDOUT if quiet else None)


class Progress:
    """One line per trial that ends: number, state, score, best so far, trials done, ETA."""

    def __init__(self, total: int, workers: int, direction: str, metric: str) -> None:
        self.total, self.workers, self.maximize, self.metric = total, workers, direction == "maximize", metric
        self.seen: set[int] = set()
        self.started = time.monotonic()
        self.finished_here = 0

    def update(self, attempts: dict[int, Any]) -> list[str]:
        lines = []
        finals = {n: t for n, t in attempts.items() if is_final(t)}
        values = [(t.value, n) for n, t in finals.items() if t.state.name == "COMPLETE" and t.value is not None]
        best = (max if self.maximize else min)(values) if values else None
        for number in sorted(set(finals) - self.seen):
            self.seen.add(number)
            self.finished_here += 1
            frozen = finals[number]
            score = (f"{self.metric}={frozen.value:.4f}" if frozen.state.name == "COMPLETE"
                     else f"pruned after epoch {frozen.user_attrs.get('pruned_at_epoch')}"
                     if frozen.state.name == "PRUNED" else frozen.user_attrs.get("error", ""))
            left = self.total - len(finals)
            rate = (time.monotonic() - self.started) / self.finished_here
            eta = _duration(rate * left) if left else "0s"
            lines.append(f"trial {number:>3} {frozen.state.name:<8} {score}  best {best[0]:.4f} (trial {best[1]})  "
                         f"{len(finals)}/{self.total} done, ETA {eta}" if best else
                         f"trial {number:>3} {frozen.state.name:<8} {score}  {len(finals)}/{self.total} done, ETA {eta}")
        return lines


def _duration(seconds: float) -> str:
    from torchwork.engine.progress import format_duration

    return format_duration(seconds)


def run_workers(prepared: dict[str, Any], options: TuneOptions, threads: int) -> None:
    """Start the workers, print a line per finished trial, restart a worker that died while work remains."""
    from torchwork.tune.recovery import recover
    from torchwork.tune.study import latest_attempts

    study, folder, url = prepared["study"], prepared["folder"], prepared["url"]
    deadline = time.time() + options.timeout if options.timeout else None
    recover(study)  # trials of a killed study: failed and queued again, before the workers start
    quiet = options.workers > 1
    workers = {i: start_worker(folder, url, threads, i, quiet, deadline) for i in range(options.workers)}
    progress = Progress(options.trials, options.workers, prepared["target"].objective["direction"],
                        prepared["target"].objective["name"])
    progress.seen = {n for n, t in latest_attempts(study.get_trials(deepcopy=False)).items() if is_final(t)}
    restarts = 0
    try:
        while workers:
            time.sleep(1.0)
            for index, process in list(workers.items()):
                code = process.poll()
                if code is None:
                    continue
                del workers[index]
                if code != 0:
                    print(f"torchwork tune: worker {index} stopped ({_exit(code)}); its trial is queued again.",
                          file=sys.stderr, flush=True)
                    recover(study)
                    waiting = study.get_trials(deepcopy=False, states=(_waiting(),))
                    if waiting and restarts < 2 * options.trials and (deadline is None or time.time() < deadline):
                        restarts += 1
                        workers[index] = start_worker(folder, url, threads, index, quiet, deadline)
            for line in progress.update(latest_attempts(study.get_trials(deepcopy=False))):
                say_whole(line)
    except BaseException:
        for process in workers.values():
            process.kill()
        raise
    for line in progress.update(latest_attempts(study.get_trials(deepcopy=False))):
        say_whole(line)


def say_whole(line: str) -> None:
    """Print ``line`` in one write: a worker shares this stdout, and ``print`` under ``PYTHONUNBUFFERED`` writes
    the text and its newline apart (see :mod:`torchwork.whole_lines`)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _waiting() -> Any:
    from optuna.trial import TrialState

    return TrialState.WAITING


def _exit(code: int) -> str:
    if code < 0:
        import signal

        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def tune(options: TuneOptions) -> dict[str, Any]:
    """Run (or continue) a study to ``options.trials`` trials; returns ``summary.json``'s content."""
    from torchwork.tune.results import finish

    started = time.perf_counter()
    prepared = prepare(options)
    threads = threads_per_worker(options.workers)
    from torchwork.tune.storage import describe_url

    print(f"torchwork tune: study {prepared['study'].study_name} in {describe_url(prepared['url'])}, "
          f"{options.trials} trials ({prepared['queued']} new), {options.workers} worker(s) x {threads} thread(s), "
          f"pruner {options.pruner}; folder {prepared['folder']}", flush=True)
    with _not_resuming():
        run_workers(prepared, options, threads)
        return finish(prepared, options, threads, started)


@contextlib.contextmanager
def _not_resuming() -> Iterator[None]:
    """``TORCHWORK_RESUME`` unset while the study runs: `torchwork resume TRIAL_RUN` runs the study's command
    with it set, and the study resumes its trials itself (each from its own folder); the runs after the trials
    (the defaults, the best settings) are new runs."""
    before = os.environ.pop("TORCHWORK_RESUME", None)
    try:
        yield
    finally:
        if before is not None:
            os.environ["TORCHWORK_RESUME"] = before


def unfinished_message(summary: dict[str, Any], options: TuneOptions) -> str | None:
    """Why the command fails when no trial completed (None when one did, or when the study stopped at its
    ``--timeout`` with trials still queued: the next run continues them)."""
    counts = summary["trials"]
    if counts["complete"] or (options.timeout is not None and counts["unfinished"]):
        return None
    logs = " and workers/<i>.log" if options.workers > 1 else ""
    return (f"torchwork tune: no trial of study {summary['study']} completed ({counts['failed']} failed, "
            f"{counts['pruned']} pruned, {counts['unfinished']} unfinished): each trial's error is in "
            f"{summary['folder']}/trials/<n>/trial.json{logs}.")


def tune_objective(objective: str, space: str | Mapping[str, Any], trials: int, *, metric: str,
                   direction: str = "maximize", run_dir: str = "runs", study: str | None = None, workers: int = 1,
                   storage: str | None = None, seed: int = 0, pruner: str = "percentile",
                   timeout: float | None = None) -> dict[str, Any]:
    """Tune a user's own objective: ``objective`` names a function (``path/to/file.py:function`` or
    ``package.module:function``) of a :class:`~torchwork.tune.objective.TrialSetup` that trains a Trainer
    with ``run_dir=trial.run_dir`` and ``callbacks=trial.callbacks`` and returns its validation score.
    K ``workers`` processes each load it by that name; everything else is as for a recipe (seeded params
    from the trial number, pruning on ``metric``, a killed worker's trial resumed from its checkpoint).
    The study's folder is ``<run_dir>/tune/<study>/``; returns ``summary.json``'s content. A bad name is
    refused before anything is written:

        >>> tune_objective("train.py", {"lr": {"low": 0.01, "high": 0.1}}, trials=4, metric="val_loss")
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: 'train.py' is not an objective: write path/to/file.py:function or package.module:function (a function of the trial that trains a Trainer and returns its validation score).
    """
    return tune(TuneOptions(objective, space, trials, workers=workers, storage=storage, study=study, seed=seed,
                            pruner=pruner, timeout=timeout, final=False, metric=metric, direction=direction,
                            run_dir=run_dir))
