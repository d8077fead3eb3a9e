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
import os
import re
import secrets
import time
from pathlib import Path

from torchwork.errors import ConfigError

_ID = re.compile("[0-9a-f]{6}")
_LAST_ID = 0xFFFFFF


def check_run_dir(run_dir: object) -> Path:
    """``run_dir`` as a Path, refused with a ConfigError (before anything is written) when it is no path, or
    when it, or the nearest part of it that exists, is something other than a directory (a regular file).

    Example:
        >>> check_run_dir("runs")
        PosixPath('runs')
        >>> check_run_dir(3)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: run_dir=3 must be a path (a str or os.PathLike) of a directory to keep runs in.
    """
    path = os.fspath(run_dir) if isinstance(run_dir, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path:
        raise ConfigError(f"run_dir={run_dir!r} must be a path (a str or os.PathLike) of a directory to keep runs in.")
    root = Path(path)
    for part in (root, *root.parents):
        try:
            if part.is_dir():
                break
            if not (part.exists() or part.is_symlink()):
                continue  # made when the first run starts
        except OSError:
            break  # not ours to read (permissions): creating the run folder says why
        what = "is" if part == root else f"is under {str(part)!r}, which is"
        raise ConfigError(f"run_dir={str(root)!r} {what} not a directory: pass a directory to keep runs in "
                          "(made when missing), not a file.")
    return root


def new_run_folder(run_dir: str | Path) -> Path:
    """Create and return a fresh run folder under ``run_dir``; names sort by start time.

    Two runs started in the same second would sort by their random ids; so a later one's id is drawn above
    the ids already taken in that second, and "the latest run" stays the one started last.
    """
    root = check_run_dir(run_dir)
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
