"""What a test session builds once for all its xdist workers: a trained and exported artifact, a model folder, a
whole quickstart run, that test modules on several workers read.

A session fixture is one per test process: under three workers a model folder that six modules read was built
up to three times. :func:`built_once` builds into a folder of the run's shared root (the controller's
temporary folder, ``TORCHWORK_TESTS_SHARED``, set in ``isolation.py``), under an exclusive lock: the first
worker to ask builds, the others wait on the lock and read what it built (pytest-xdist's documented pattern
for a session fixture run once, with a file lock). A build that failed leaves no ``.built`` mark, so the next
worker to ask removes what it left and builds again. Whoever reads a shared build must not change it: copy
first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

SHARED = "TORCHWORK_TESTS_SHARED"
_MARK = ".built"


def shared_root() -> Path:
    """The run's shared folder (a folder of this process's own when no controller set one)."""
    root = os.environ.get(SHARED) or os.path.join(tempfile.gettempdir(), "shared-builds")
    os.makedirs(root, exist_ok=True)
    return Path(root)


def built_once(name: str, build: Callable[[Path], object]) -> Path:
    """The folder ``name`` of the shared root, which ``build(folder)`` filled, in this or another worker."""
    if not name.replace("-", "").isalnum():
        raise ValueError(f"a shared build's name is letters, digits and '-', got {name!r}")
    root = shared_root()
    folder = root / name
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        if not (folder / _MARK).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            build(folder)
            (folder / _MARK).touch()
    return folder
