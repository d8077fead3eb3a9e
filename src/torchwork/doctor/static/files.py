"""Which files a static scan reads, and reading one safely.

A folder is walked without following symbolic links, skipping virtual environments, version control,
caches and build output; only ``*.py`` regular files are read, each bounded in size (a generated file of
megabytes is reported as skipped, not parsed). A file named on the command line is read whatever its
suffix. Nothing is imported or executed: the bytes go to :func:`ast.parse`.

Example:
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / ".venv").mkdir(); _ = (root / ".venv" / "x.py").write_text("")
    >>> _ = (root / "train.py").write_text("print(1)")
    >>> [p.name for p in python_files([root])[0]]
    ['train.py']
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from torchwork.errors import ConfigError
from torchwork.paths import FileTooLarge, NotRegularFile, read_regular

MAX_BYTES = 2 * 1024 * 1024  # the largest source file read; larger ones are generated, not written
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", ".env", "env", "node_modules", "__pycache__",
                          "build", "dist", "site-packages", ".tox", ".nox", ".mypy_cache", ".pytest_cache",
                          ".ruff_cache", ".eggs", ".ipynb_checkpoints"})


def _skipped_dir(name: str) -> bool:
    return name in SKIPPED_DIRS or name.endswith(".egg-info")


def _walk(folder: Path, found: list[Path]) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.is_dir(follow_symlinks=False):
            if not _skipped_dir(entry.name):
                _walk(Path(entry.path), found)
        elif entry.name.endswith(".py") and entry.is_file(follow_symlinks=False):
            found.append(Path(entry.path))


def python_files(paths: list[Path]) -> tuple[list[Path], list[tuple[str, str]]]:
    """The files to scan under ``paths`` (files as given, folders walked), and the paths refused with why.

    A path that does not exist is a :class:`ConfigError`: a CI job that scans nothing must not pass.
    """
    found: list[Path] = []
    refused: list[tuple[str, str]] = []
    for path in paths:
        if not os.path.lexists(path):
            raise ConfigError(f"doctor --static: no file or folder {str(path)!r}. Pass the repository's folder "
                              "(torchwork doctor --static .) or Python files.")
        mode = os.stat(path).st_mode if path.exists() else 0
        if stat.S_ISDIR(mode):
            _walk(path, found)
        elif stat.S_ISREG(mode):
            found.append(path)
        else:
            refused.append((str(path), "not a regular file or folder"))
    unique = list(dict.fromkeys(found))
    return unique, refused


def read_source(path: Path) -> bytes:
    """The file's bytes, read as a regular file; ``ValueError`` when it is larger than :data:`MAX_BYTES`."""
    try:
        return read_regular(path, MAX_BYTES, follow_links=False)
    except NotRegularFile as error:
        raise ValueError(str(error)) from None
    except FileTooLarge:
        raise ValueError(f"larger than {MAX_BYTES // (1024 * 1024)} MiB") from None
