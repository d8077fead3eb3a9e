"""Metric loggers: ``metrics.jsonl`` (one JSON object a line) and TensorBoard event files.

Example:
    >>> import tempfile, pathlib, json
    >>> from torchwork.runs.loggers import JsonlLogger
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
    >>> logger = JsonlLogger(path); logger.log({"loss": 0.5}, step=10); logger.close()
    >>> json.loads(path.read_text())["step"]
    10
"""

from __future__ import annotations

import errno
import json
import math
import sys
import time
from pathlib import Path
from typing import Any


class JsonlLogger:
    """Appends ``{"step", "time", **metrics}`` lines; on resume, drops lines logged after the checkpoint."""

    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        if resume_step is not None and self.path.exists():
            kept = [line for line in _read_metrics(self.path).splitlines()
                    if line.strip() and _step_of(line) <= resume_step]
            from torchwork.files import atomic_write
            with atomic_write(self.path, "w") as handle:
                handle.write("".join(line + "\n" for line in kept))
        self.handle = self.path.open("a", buffering=1)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, "time": round(time.time(), 3)}
        row.update({k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in metrics.items()})
        line = json.dumps(row, default=str) + "\n"
        try:
            self.handle.write(line)
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            from torchwork.files import disk_full_error
            raise disk_full_error(self.path, len(line.encode()), error) from error

    def close(self) -> None:
        self.handle.close()


# What a run's metrics.jsonl may be when a resume rewrites it: a million epochs' lines; more is not one.
MAX_METRICS_BYTES = 256 * 2**20


def _read_metrics(path: Path) -> str:
    """The text of a resumed run's metrics.jsonl, read as a bounded regular file."""
    from torchwork.errors import CheckpointError
    from torchwork.paths import read_regular

    try:
        return read_regular(path, MAX_METRICS_BYTES).decode("utf-8", errors="replace")
    except OSError as error:
        raise CheckpointError(f"{path} cannot be read as the run's metrics ({error}); move it aside to resume "
                              "(the metrics logged before the checkpoint are then lost).") from None


def _step_of(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except json.JSONDecodeError:
        return math.inf  # a line cut by a crash: drop it


class TensorBoardLogger:
    """Scalars to TensorBoard event files (``tensorboard --logdir runs``); a no-op when not installed."""

    def __init__(self, directory: str | Path, resume_step: int | None = None) -> None:
        self.writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            print("torchwork: tensorboard is not installed, so no event files are written "
                  "(pip install 'torchwork[runs]').", file=sys.stderr)
            return
        # purge_step hides events a crashed run wrote after the checkpoint we resume from
        self.writer = SummaryWriter(str(directory), purge_step=resume_step + 1 if resume_step else None)
        self.resumed = resume_step is not None

    def declare_hparams(self, manifest: dict[str, Any]) -> None:
        """The run's settings for TensorBoard's HParams table (once, when the run starts)."""
        if self.writer is not None and not self.resumed:
            from torchwork.runs.hparams import write_session_start

            write_session_start(self.writer, manifest)

    def write_hparams(self, monitor: str, best: float | None, final: float | None, step: int | None) -> None:
        """The monitored metric's best and final values, the HParams table's metric columns."""
        if self.writer is not None:
            from torchwork.runs.hparams import write_metrics

            write_metrics(self.writer, monitor, best, final, step)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.writer is None:
            return
        prefix = "epoch/" if "train_loss" in metrics else "step/"
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in ("step", "epoch"):
                self.writer.add_scalar(prefix + name, value, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
