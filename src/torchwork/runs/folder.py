"""Run folders: ``<run_dir>/<UTC timestamp>-<short id>/`` with a manifest, metrics and checkpoints.

Example:
    >>> import tempfile
    >>> from torchwork.runs.folder import new_run_folder, latest_run
    >>> root = tempfile.mkdtemp()
    >>> run = new_run_folder(root)
    >>> latest_run(root) == run and (run / "checkpoints").is_dir()
    True
"""

from __future__ import annotations

import datetime
import secrets
from pathlib import Path


def new_run_folder(run_dir: str | Path) -> Path:
    """Create and return a fresh run folder under ``run_dir``; names sort by start time."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(run_dir) / f"{stamp}-{secrets.token_hex(3)}"
    (path / "checkpoints").mkdir(parents=True, exist_ok=False)
    return path


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and (path / "checkpoints").is_dir()


def list_runs(run_dir: str | Path) -> list[Path]:
    """Run folders under ``run_dir``, oldest first."""
    root = Path(run_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if is_run_folder(p))


def latest_run(run_dir: str | Path) -> Path | None:
    runs = list_runs(run_dir)
    return runs[-1] if runs else None
