"""What a run records about itself at its start and its end, beyond what built the model.

At the start: a fingerprint of every data split (:mod:`torchwork.runs.fingerprint`), the code with its
patch (:mod:`torchwork.runs.code`), the threads, the process that runs it (so that a reader can tell a run
still going from one that was killed), and the metric that picks the best checkpoint. At the end: the
state (finished, failed, interrupted, pruned), when, and the monitored metric's best and final values.
``torchwork runs ls`` reads these back from the manifest alone.

Example:
    >>> sorted(thread_settings())
    ['affinity_cpus', 'environment', 'interop', 'torch']
    >>> end_state(None), end_state(KeyboardInterrupt()), end_state(ValueError("x"))
    ('finished', 'interrupted', 'failed')
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def thread_settings() -> dict[str, Any]:
    """torch's intra- and inter-op threads, the CPUs this process may use, and the variables that set them."""
    import torch

    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
            "affinity_cpus": len(affinity) if affinity is not None else os.cpu_count(),
            "environment": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ}}


def record_start(run: Path, splits: Mapping[str, Any], monitor: str, mode: str) -> dict[str, Any]:
    """The manifest fields a run adds when it starts (see the module docstring)."""
    from torchwork.runs.code import record_code
    from torchwork.runs.fingerprint import record_splits

    started = time.perf_counter()
    fingerprints = record_splits(run, splits)
    fingerprint_s = time.perf_counter() - started
    return {"fingerprints": fingerprints, "fingerprint_seconds": round(fingerprint_s, 4),
            "git": record_code(run), "threads": thread_settings(), "monitor": {"metric": monitor, "mode": mode},
            **running_fields()}


def running_fields() -> dict[str, Any]:
    """Who runs it now: state ``running`` with this process id and host (set again on each resume)."""
    return {"state": "running", "process": {"pid": os.getpid(), "host": socket.gethostname()}}


def end_state(error: BaseException | None) -> str:
    """The state a run ends in, from the exception that ended it (None: it finished)."""
    if error is None:
        return "finished"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if type(error).__name__ == "TrialPruned":  # optuna's, raised through fit by a pruning callback
        return "pruned"
    return "failed"


def record_end(manifest: dict[str, Any], error: BaseException | None, best: float | None,
               final: float | None, steps: int | None) -> dict[str, Any]:
    """``manifest`` with its end recorded."""
    manifest["state"] = end_state(error)
    manifest["ended"] = now()
    if error is not None:
        manifest["error"] = f"{type(error).__name__}: {str(error)[:300]}"
    else:
        manifest.pop("error", None)
    monitored = manifest.setdefault("monitor", {})
    if isinstance(monitored, dict):  # a resumed run that ends before its next checkpoint keeps what it had
        monitored.update({k: v for k, v in (("best", best), ("final", final), ("steps", steps)) if v is not None})
    return manifest
