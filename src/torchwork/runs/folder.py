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
import re
import secrets
import time
from pathlib import Path

_ID = re.compile("[0-9a-f]{6}")
_LAST_ID = 0xFFFFFF


def new_run_folder(run_dir: str | Path) -> Path:
    """Create and return a fresh run folder under ``run_dir``; names sort by start time.

    Two runs started in the same second would sort by their random ids; so a later one's id is drawn above
    the ids already taken in that second, and "the latest run" stays the one started last.
    """
    root = Path(run_dir)
    while True:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        taken = [int(p.name.rpartition("-")[2], 16) for p in (root.glob(f"{stamp}-*") if root.is_dir() else [])
                 if _ID.fullmatch(p.name.rpartition("-")[2])]
        low = max(taken, default=-1) + 1
        if low <= _LAST_ID:
            break
        time.sleep(0.05)  # the second's ids are all above: the next second starts afresh
    path = root / f"{stamp}-{low + secrets.randbelow(min(_LAST_ID - low + 1, 4096)):06x}"  # a small step: room for many
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
