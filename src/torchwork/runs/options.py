"""How a run is kept: its folder, checkpoints and what the manifest records (validated when built).

Example:
    >>> from torchwork.runs.options import RunOptions
    >>> RunOptions("runs", checkpoint_every_n_steps=100).keep_checkpoints
    3
    >>> RunOptions(keep_checkpoints=0)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: keep_checkpoints=0 must be an integer >= 1 (how many step checkpoints to keep; best.pt is kept besides).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torchwork.arguments import check_flag
from torchwork.errors import ConfigError
from torchwork.runs.folder import check_run_dir


@dataclass(frozen=True)
class RunOptions:
    """Where a run is kept and how it is checkpointed.

    Args:
        run_dir: keep runs here: each ``fit`` makes ``run_dir/<UTC time>-<id>/`` with ``manifest.json``,
            ``metrics.jsonl``, TensorBoard events and ``checkpoints/`` (nothing is written without it).
        checkpoint_every_n_steps: also checkpoint mid-epoch every n optimizer steps (always at epoch end).
        keep_checkpoints: how many step checkpoints to keep (``best.pt`` is kept besides).
        checkpoint_monitor: ``(metric, "min"|"max")`` that picks ``best.pt`` (default: the early-stopping
            metric, else ``val_loss``/``train_loss``).
        config: the resolved configuration to record in the manifest.
        tensorboard: write TensorBoard event files (scalars, and the HParams table) into the run folder.
        data_splits: more splits to fingerprint in the manifest, by name (e.g. ``{"test": test_dataset}``);
            the train and validation loaders given to ``fit`` are always fingerprinted.
    """

    run_dir: str | os.PathLike[str] | None = None
    checkpoint_every_n_steps: int | None = None
    keep_checkpoints: int = 3
    checkpoint_monitor: tuple[str, str] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    tensorboard: bool = True
    data_splits: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        every = self.checkpoint_every_n_steps
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise ConfigError(f"checkpoint_every_n_steps={every!r} must be an integer >= 1.")
        keep = self.keep_checkpoints
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigError(f"keep_checkpoints={keep!r} must be an integer >= 1 (how many step checkpoints to "
                              "keep; best.pt is kept besides).")
        check_flag(self.tensorboard, "tensorboard")  # tensorboard="no" wrote the event files
        if self.run_dir is not None:
            check_run_dir(self.run_dir)  # a file there, or a path that is no path: refused before any run
        object.__setattr__(self, "config", dict(self.config or {}))
        object.__setattr__(self, "data_splits", dict(self.data_splits or {}))
