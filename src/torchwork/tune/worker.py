"""A worker process: claims waiting trials of the study one at a time and trains them, until none is left.

``torchwork tune`` starts K of them (``python -m torchwork.tune.worker STUDY_FOLDER``) with
``OMP_NUM_THREADS`` and ``TORCHWORK_TUNE_THREADS`` set to floor(cores / K) in their environment, so torch
starts its pool with that many threads, and a fresh process per worker has no pool left from elsewhere
(ray#35937). The storage URL comes in ``TORCHWORK_TUNE_STORAGE`` (a password never lands in a file).
A worker dies with its parent (Linux ``PR_SET_PDEATHSIG``): killing the study kills its workers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchwork.whole_lines import keep_lines_whole

SPEC = "worker.json"  # in the study folder: what the workers run (no secret in it)


def _die_with_parent() -> None:
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def load_spec(study_folder: Path) -> dict[str, Any]:
    return json.loads((study_folder / SPEC).read_text())


def open_study_for(spec: dict[str, Any], url: str) -> Any:
    """The study, from a worker's spec, with the storage's heartbeat and its stale-trial retries."""
    import optuna

    from torchwork.tune.pruning import make_pruner
    from torchwork.tune.recovery import queue_retry
    from torchwork.tune.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url, spec["heartbeat_s"], spec["grace_s"], stale_callback=queue_retry)
    return optuna.load_study(study_name=spec["study"], storage=storage,
                             pruner=make_pruner(spec["pruner"], spec["max_epochs"], spec["trials"]))


def target_from_spec(spec: dict[str, Any]) -> Any:
    """The recipe or the user's objective (loaded again by its name: code the user owns) the study tunes."""
    if "objective" in spec["base"]:
        from torchwork.tune.objective import ObjectiveTarget

        return ObjectiveTarget.from_worker_base(spec["base"], spec["seed"])
    from torchwork.tune.target import RecipeTarget

    return RecipeTarget.from_worker_base(spec["base"], spec["seed"])


def work(study_folder: Path, url: str, threads: int, deadline: float | None = None) -> int:
    """Run trials until none waits and none runs elsewhere (or ``deadline`` passed); returns how many."""
    import torch
    from optuna.trial import TrialState

    from torchwork.tune.recovery import recover
    from torchwork.tune.space import Space
    from torchwork.tune.trial import claim, give_way, is_duplicate, run_trial

    torch.set_num_threads(threads)
    spec = load_spec(study_folder)
    target = target_from_spec(spec)
    space = Space.from_mapping(spec["space"], target.integer_fields)
    study = open_study_for(spec, url)
    done = 0
    while deadline is None or time.time() < deadline:
        recover(study)
        trial = claim(study)
        if trial is None:
            if study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                time.sleep(1.0)  # one may die and come back as a waiting retry
                continue
            break
        if is_duplicate(study, trial):
            give_way(study, trial)
            continue
        run_trial(study, trial, target, space, study_folder, threads, spec["heartbeat_s"])
        done += 1
    return done


def study_command(environ: Mapping[str, str]) -> list[str] | None:
    """The study's command line its parent hands over (``TORCHWORK_TUNE_COMMAND``), or None."""
    try:
        command = json.loads(environ.get("TORCHWORK_TUNE_COMMAND", "null"))
    except ValueError:
        return None
    return command if isinstance(command, list) and command and all(isinstance(a, str) for a in command) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    url = os.environ.get("TORCHWORK_TUNE_STORAGE")
    if not url or len(argv) != 1:
        print("torchwork: error: a tune worker runs under `torchwork tune`, which hands it the study's storage. "
              "To continue a study (and a trial's run in it), run its `torchwork tune ... --study NAME` command "
              "again: each killed trial continues from its newest checkpoint.", file=sys.stderr)
        return 2
    _die_with_parent()
    keep_lines_whole(sys.stdout, sys.stderr)
    # Each trial's run records the study's command as the one that made it (its manifest's `command`):
    # `torchwork resume TRIAL_RUN` runs that, not this worker, which needs the storage its parent hands over.
    sys.argv = study_command(os.environ) or sys.argv
    threads = int(os.environ.get("TORCHWORK_TUNE_THREADS", "1"))
    deadline = float(os.environ["TORCHWORK_TUNE_DEADLINE"]) if os.environ.get("TORCHWORK_TUNE_DEADLINE") else None
    work(Path(argv[0]), url, threads, deadline)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
