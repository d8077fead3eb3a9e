"""TensorBoard's HParams table: every run's settings and its monitored metric, in one table.

``SummaryWriter.add_hparams`` writes into a new sub-folder per call, so a run's settings and its curves end
up as two runs in TensorBoard. Here the HParams summaries go into the run's own event files instead: the
settings when the run starts, the metric values (``hparams/best_<metric>``, ``hparams/final_<metric>``)
when it ends, so ``tensorboard --logdir runs/`` shows one row per run folder.

Example:
    >>> hparam_values({"config": {"lr": 0.1, "sizes": [1, 2], "l2": None}, "seed": 3})["config.sizes"]
    '[1, 2]'
    >>> metric_tags("val_macro_f1")
    ['hparams/best_val_macro_f1', 'hparams/final_val_macro_f1']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MAX_HPARAMS = 200  # TensorBoard's table becomes unreadable well before this


def _flat(prefix: str, value: Any, into: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, into)
    elif isinstance(value, bool) or isinstance(value, (int, float, str)):
        into[prefix] = value
    else:
        into[prefix] = json.dumps(value, default=str) if value is not None else "None"


def hparam_values(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What the HParams table shows of a run: its config, seed, precision, threads and commit (scalars)."""
    values: dict[str, Any] = {}
    _flat("config", manifest.get("config") or {}, values)
    values["seed"] = manifest.get("seed") if isinstance(manifest.get("seed"), int) else str(manifest.get("seed"))
    training = manifest.get("training") or {}
    if isinstance(training, Mapping):
        values["precision"] = str(training.get("precision"))
    threads = manifest.get("threads") or {}
    if isinstance(threads, Mapping) and isinstance(threads.get("torch"), int):
        values["threads"] = threads["torch"]
    git = manifest.get("git") or {}
    if isinstance(git, Mapping) and git.get("commit"):
        values["commit"] = str(git["commit"])[:10] + ("+patch" if git.get("dirty") else "")
    return dict(list(values.items())[:MAX_HPARAMS])


def metric_tags(monitor: str) -> list[str]:
    return [f"hparams/best_{monitor}", f"hparams/final_{monitor}"]


def write_session_start(writer: Any, manifest: Mapping[str, Any]) -> None:
    """The experiment and session-start summaries, into ``writer``'s own event file."""
    from torch.utils.tensorboard.summary import hparams

    monitor = str((manifest.get("monitor") or {}).get("metric") or "val_loss")
    experiment, start, end = hparams(hparam_values(manifest), dict.fromkeys(metric_tags(monitor), 0.0))
    file_writer = writer._get_file_writer()  # the public add_hparams writes into a new sub-folder instead
    for summary in (experiment, start, end):
        file_writer.add_summary(summary)


def write_metrics(writer: Any, monitor: str, best: float | None, final: float | None, step: int | None) -> None:
    for tag, value in zip(metric_tags(monitor), (best, final)):
        if value is not None:
            writer.add_scalar(tag, value, step or 0)
    writer.flush()
