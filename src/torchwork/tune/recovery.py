"""Trials whose worker died: failed, and queued again under the same number with the same params.

Two ways to know a worker died. On this machine, its process is gone (the trial records the worker's host,
pid and process start time, so a reused pid is not mistaken for it): that is known at once, so a killed
study continues as soon as it is run again. Elsewhere, its heartbeat stopped (Optuna's RDB heartbeat; the
trial is stale after ``grace`` seconds). Either way exactly one process wins the RUNNING -> FAIL transition
and queues the retry; the retried trial resumes from the killed one's last checkpoint in the trial's folder.

Example:
    >>> import os
    >>> me = worker_identity()
    >>> me["pid"] == os.getpid() and is_alive(me)
    True
    >>> is_alive({**me, "started": -1})    # same pid, another process
    False
"""

from __future__ import annotations

import os
import socket
import warnings
from typing import Any


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (None when it does not exist)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def worker_identity() -> dict[str, Any]:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": process_start(pid)}


def is_alive(worker: dict[str, Any]) -> bool:
    """Whether the worker process (on this host) still runs."""
    started = process_start(int(worker["pid"]))
    return started is not None and (worker.get("started") is None or started == worker["started"])


def queue_retry(study: Any, frozen: Any) -> None:
    """Queue the next attempt of a failed trial's number, with the same params."""
    study.enqueue_trial(dict(frozen.params) or dict(frozen.system_attrs.get("fixed_params", {})),
                        user_attrs={"trial": frozen.user_attrs["trial"],
                                    "attempt": int(frozen.user_attrs.get("attempt", 0)) + 1,
                                    "retry_of": frozen.number})


def fail_and_retry(study: Any, frozen: Any) -> bool:
    """Fail a RUNNING trial whose worker died and queue its retry; False when another process did it."""
    import optuna
    from optuna.trial import TrialState

    try:
        won = study._storage.set_trial_state_values(frozen._trial_id, state=TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    if won:
        queue_retry(study, frozen)
    return bool(won)


def recover(study: Any) -> list[int]:
    """Fail and re-queue the RUNNING trials whose worker died (here: gone; anywhere: stale heartbeat);
    returns the tuner trial numbers re-queued by this process."""
    import optuna
    from optuna.trial import TrialState

    host = socket.gethostname()
    requeued = []
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = frozen.system_attrs.get("torchwork_worker")
        if worker and worker.get("host") == host and not is_alive(worker) and fail_and_retry(study, frozen):
            requeued.append(frozen.user_attrs.get("trial"))
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # the storage's callback is queue_retry
    requeued += [t.user_attrs.get("trial") for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
                 if t.number not in before]
    return requeued
