"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Files are written with the mode a plain ``open()`` would give them (``0o666`` less the umask), the temp file
beside the target has a name :func:`remove_temp_files` recognises, and a full disk is a
:class:`~torchwork.errors.DiskFullError` naming the path, the bytes needed and the bytes free.

Example:
    >>> import pathlib, tempfile
    >>> from torchwork.files import atomic_write
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "hello.txt"
    >>> with atomic_write(path) as f:
    ...     _ = f.write(b"hello")
    >>> path.read_bytes(), oct(path.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())
    (b'hello', True)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from torchwork.errors import ConfigError, DiskFullError

# mkstemp's names: the prefix, 8 characters from [a-z0-9_], the suffix.
TEMP_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
# deploy.export's directories: the artifact being written (mkdtemp) and the one it replaces.
TEMP_DIR_NAME = re.compile(r"^\..+\.(export-[a-z0-9_]{8}|old-\d+-\d+)$")
_FULL = (errno.ENOSPC, errno.EDQUOT)


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (changing it is not thread-safe)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a directory entry (a rename is durable only after this) where the OS allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def free_bytes(directory: str | os.PathLike[str]) -> int:
    """Bytes a non-root writer may still use on the filesystem holding ``directory``."""
    return shutil.disk_usage(directory).free


def disk_full_error(path: Path, needed: int | None, error: OSError | None = None) -> DiskFullError:
    """The torchwork error for a write of ``needed`` bytes to ``path`` that does not fit."""
    free = free_bytes(path.parent)
    size = f"{needed:,} bytes" if needed is not None else "more space"
    cause = f" ({os.strerror(error.errno)})" if error is not None and error.errno else ""
    return DiskFullError(f"cannot write {path}: it needs {size} and the filesystem has {free:,} bytes free"
                         f"{cause}. Nothing was replaced: the previous file (if any) is intact. Free some space "
                         "(or point the run elsewhere) and run again.")


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb",
                 size: int | None = None) -> Iterator[IO[Any]]:
    """Write to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    If the body raises, the temporary file is removed and ``path`` is untouched. ``size``: the bytes about
    to be written, when known; they are checked against the free space first and named if the disk is full.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if size is not None and size > free_bytes(path.parent):
        raise disk_full_error(path, size)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; a kept file gets open()'s mode
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.errno in _FULL:
            raise disk_full_error(path, size, error) from error
        raise
    fsync_dir(path.parent)


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON, atomically."""
    with atomic_write(path, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=False, default=str)
        handle.write("\n")


def remove_temp_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temp files that interrupted :func:`atomic_write` calls left in ``folder`` and below, and
    the temp directories of interrupted exports (``.NAME.export-xxxxxxxx``, ``.NAME.old-PID-NS``).

    Only those names are touched. Call it only on a folder that this process owns (a run folder it is about
    to continue), never on a shared one.
    """
    removed = []
    for directory, subdirectories, names in os.walk(folder):
        for name in list(subdirectories):
            candidate = Path(directory) / name
            if TEMP_DIR_NAME.match(name) and not candidate.is_symlink():
                shutil.rmtree(candidate, ignore_errors=True)
                subdirectories.remove(name)
                removed.append(candidate)
        for name in names:
            candidate = Path(directory) / name
            if TEMP_NAME.match(name) and candidate.is_file() and not candidate.is_symlink():
                candidate.unlink(missing_ok=True)
                removed.append(candidate)
    return removed


def check_output_file(path: str, example: str, what: str, option: str = "-o") -> None:
    """A :class:`~torchwork.errors.ConfigError`, before any work, for an output path that cannot become a
    file: a directory (``example`` names a file in it), or a path under something that is not a directory.

    Example:
        >>> import tempfile
        >>> check_output_file(tempfile.gettempdir(), "lock.txt", "the lock file")
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: -o ... is a directory; give a file name for the lock file, e.g. -o .../lock.txt.
    """
    if os.path.isdir(path):
        raise ConfigError(f"{option} {path} is a directory; give a file name for {what}, e.g. {option} "
                          f"{os.path.join(path, example)}.")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{option} {path}: {parent} is not a directory, so {what} cannot be written under it; "
                          "give another path.")
