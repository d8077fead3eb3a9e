"""One trial, claimed by a worker: its folder, its heartbeat, the training, and its end told to the study.

The trial's folder is ``<study folder>/trials/<number>/``: ``trial.json`` (study, number, attempt, params,
threads, state, value) and the engine's run folder inside it (manifest, metrics, checkpoints). The run's
manifest also names the study, the trial and its params (``config.tune``). A retried trial continues the
newest run in its folder from its newest valid checkpoint (``TORCHWORK_RESUME``, the engine's exact resume).

Example:
    >>> import pathlib, tempfile
    >>> trial_folder(pathlib.Path(tempfile.mkdtemp()), 7).name
    '7'
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchwork.files import write_json


def trial_folder(study_folder: Path, number: int) -> Path:
    return study_folder / "trials" / str(number)


def claim(study: Any) -> Any:
    """The lowest-numbered waiting trial, now RUNNING and owned by this process (None when none waits)."""
    import optuna
    from optuna.trial import TrialState

    from torchwork.tune.recovery import worker_identity

    storage = study._storage
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    for frozen in sorted(waiting, key=lambda t: (t.user_attrs.get("trial", 1 << 30), t._trial_id)):
        try:
            if not storage.set_trial_state_values(frozen._trial_id, state=TrialState.RUNNING):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        storage.set_trial_system_attr(frozen._trial_id, "torchwork_worker", worker_identity())
        storage.record_heartbeat(frozen._trial_id)
        return optuna.trial.Trial(study, frozen._trial_id)
    return None


def is_duplicate(study: Any, trial: Any) -> bool:
    """Whether this claimed copy of a trial number must give way: another copy finished well, or another copy
    that is still live (waiting or running) was queued before it.

    Two machines that open a fresh study at once both queue every number, so each number can have two
    copies. Exactly one copy per number must run: the earliest-queued live one (lowest storage id, which is
    unique where Optuna's trial numbers can repeat under concurrent inserts). Two workers that claim both
    copies at the same moment then agree on which one runs; "any other running copy" made both give way.
    """
    from optuna.trial import TrialState

    number, mine = trial.user_attrs["trial"], trial._trial_id
    for other in study.get_trials(deepcopy=False):
        if other.user_attrs.get("trial") != number or other._trial_id == mine:
            continue
        if other.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return True
        if other.state in (TrialState.WAITING, TrialState.RUNNING) and other._trial_id < mine:
            return True
    return False


def give_way(study: Any, trial: Any) -> None:
    """End a claimed copy that :func:`is_duplicate` found: failed, and marked ``duplicate`` so that reports and
    :func:`~torchwork.tune.study.latest_attempts` leave it out."""
    from optuna.trial import TrialState

    study._storage.set_trial_user_attr(trial._trial_id, "duplicate", True)
    study.tell(trial, state=TrialState.FAIL)


@contextlib.contextmanager
def heartbeat(storage: Any, trial_id: int, every_s: float) -> Iterator[None]:
    """Record the trial's heartbeat every ``every_s`` seconds while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(Exception):  # a missed beat is retried; the trial goes on
                storage.record_heartbeat(trial_id)

    thread = threading.Thread(target=beat, name="torchwork-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def resuming(folder: Path) -> Iterator[Path | None]:
    """``TORCHWORK_RESUME`` set to the newest run in ``folder`` that has a checkpoint, while the block runs."""
    from torchwork.runs.folder import list_runs

    runs = [r for r in list_runs(folder) if any((r / "checkpoints").glob("step-*.pt"))]
    run = runs[-1] if runs else None
    before = os.environ.get("TORCHWORK_RESUME")
    if run is not None:
        os.environ["TORCHWORK_RESUME"] = str(run)
    else:
        os.environ.pop("TORCHWORK_RESUME", None)
    try:
        yield run
    finally:
        if before is None:
            os.environ.pop("TORCHWORK_RESUME", None)
        else:
            os.environ["TORCHWORK_RESUME"] = before


def run_trial(study: Any, trial: Any, target: Any, space: Any, study_folder: Path, threads: int,
              heartbeat_s: float) -> dict[str, Any]:
    """Train one claimed trial and tell the study how it ended; returns what ``trial.json`` records."""
    import torch
    from optuna.trial import TrialState

    from torchwork.tune.pruning import PruningCallback

    number, attempt = trial.user_attrs["trial"], trial.user_attrs.get("attempt", 0)
    params = {setting.name: setting.suggest(trial) for setting in space.settings}
    folder = trial_folder(study_folder, number)
    folder.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"study": study.study_name, "trial": number, "attempt": attempt,
                            "optuna_trial": trial.number, "params": params, "threads": torch.get_num_threads(),
                            "state": "RUNNING", "started": time.time()}
    epochs = getattr(target.config_for(params, folder, threads), "epochs", None)
    callback = PruningCallback(trial, target.objective["name"], epochs)
    started = time.perf_counter()
    with heartbeat(study._storage, trial._trial_id, heartbeat_s), resuming(folder) as resumed:
        info["resumed_from"] = str(resumed) if resumed else None
        write_json(folder / "trial.json", info)
        # The run's config: what the trial trains with. Its attempt number is bookkeeping of the retry (kept in
        # trial.json and the trial's attributes), so a retry's config is the killed attempt's and it resumes.
        record = {"tune": {k: info[k] for k in ("study", "trial", "params", "threads")}}
        try:
            result = target.run(params, folder, threads, [callback], record)
        except Exception as error:  # the trial failed on its own (not killed): recorded, not retried
            info.update(state="FAIL", error=f"{type(error).__name__}: {error}".splitlines()[0][:500])
            _finish(study, trial, info, started, TrialState.FAIL)
        else:
            info.update(value=result["value"], epochs=len(result["history"]), resumed_epochs=callback.resumed_epochs,
                        run=str(Path(result["run_path"]).relative_to(study_folder)),
                        precision=result.get("precision"))
            if callback.pruned_at is not None:
                # epochs counted from 1, as the Trainer says "stopped after epoch 1 of 3" (it said epoch 0)
                info.update(state="PRUNED", pruned_at_epoch=callback.pruned_at + 1)
                _mark_pruned(Path(result["run_path"]))
                _finish(study, trial, info, started, TrialState.PRUNED)
            else:
                info["state"] = "COMPLETE"
                _finish(study, trial, info, started, TrialState.COMPLETE, result["value"])
    write_json(folder / "trial.json", info)
    return info


def _mark_pruned(run: Path) -> None:
    """The trial's run folder says ``pruned``, as docs/runs.md has it: the pruner stopped its fit at an epoch's
    end, which the run itself recorded as ``finished`` (`torchwork runs ls` listed pruned trials so)."""
    from torchwork.runs.readback import read_manifest

    manifest = read_manifest(run)
    if manifest.get("state") == "finished":
        manifest["state"] = "pruned"
        write_json(run / "manifest.json", manifest)


def _finish(study: Any, trial: Any, info: dict[str, Any], started: float, state: Any, value: float | None = None) -> None:
    """Record what the report shows on the trial, then tell the study (a finished trial takes no more)."""
    info["seconds"] = round(time.perf_counter() - started, 2)
    for key in ("epochs", "run", "precision", "seconds", "error", "pruned_at_epoch", "resumed_epochs"):
        if key in info:
            study._storage.set_trial_user_attr(trial._trial_id, key, info[key])
    study.tell(trial, value, state=state)
