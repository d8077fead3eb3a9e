"""Reading a folder someone else wrote: a member is read only when it resolves inside the folder and is a
regular file (or, asked for, a directory).

A symlink (of the member or of a folder above it) that leads elsewhere, a FIFO that would block the
reader, a device such as ``/dev/zero`` that never ends: each is refused from its ``stat``, before anything
opens it. Symlinks that stay inside the folder are fine.

Example:
    >>> import os, pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "weights.bin").write_bytes(b"1234")
    >>> why_unsafe(root, root / "weights.bin") is None
    True
    >>> os.symlink("/etc/hostname", root / "linked.bin")
    >>> why_unsafe(root, root / "linked.bin")
    'leads outside the folder (to /etc/hostname)'
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# The bounds of files that are read as data, shared by every layer that reads them:
MAX_MANIFEST_BYTES = 16 << 20  # a run's or an artifact's manifest lists files and settings; larger is not one
# A real vocabulary's tokenizer.json is under 20 MB (MiniLM's: 0.7 MB; XLM-R's 250k pieces: 17 MB); parsed, a
# 200 MB one cost 3.1 GB per process. Anything over this is refused before it is read.
MAX_TOKENIZER_BYTES = 64 << 20


def why_unsafe(root: str | os.PathLike[str], path: str | os.PathLike[str], directory: bool = False) -> str | None:
    """Why reading ``path`` as a member of ``root`` is unsafe, or None when it is safe (or does not exist:
    the caller reports a missing file in its own words)."""
    path = Path(path)
    if not os.path.lexists(path):
        return None
    try:
        real = path.resolve(strict=True)
        base = Path(root).resolve(strict=True)
    except FileNotFoundError:
        return "is a symlink to nothing"
    except (OSError, RuntimeError) as error:  # a symlink loop
        return f"cannot be resolved ({error})"
    if real != base and base not in real.parents:
        return f"leads outside the folder (to {real})"
    mode = os.stat(real).st_mode
    if directory and not stat.S_ISDIR(mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(mode):
        return f"is not a regular file (a {file_kind(mode)})"
    return None


class NotRegularFile(OSError):
    """What :func:`open_regular` opened is not a regular file; ``mode`` is its ``st_mode``."""

    def __init__(self, mode: int) -> None:
        super().__init__(f"not a regular file (a {file_kind(mode)})")
        self.mode = mode


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True) -> int:
    """A descriptor of ``path`` open for reading, checked with ``fstat`` to be a regular file: the file checked
    is the file read (a FIFO swapped in after an earlier check is caught), and opening never blocks (a FIFO
    opens at once, without a writer). :class:`NotRegularFile` otherwise (the descriptor closed); an OSError
    when it cannot be opened.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = path.write_bytes(b"abc")
        >>> descriptor = open_regular(path)
        >>> read_at_most(descriptor, 2), os.close(descriptor)
        (b'ab', None)
    """
    flags = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
             | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0)))
    descriptor = os.open(path, flags)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise NotRegularFile(mode)
    return descriptor


def read_at_most(descriptor: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``descriptor`` (fewer at the end of the file)."""
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(descriptor, min(1 << 16, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class FileTooLarge(OSError):
    """What :func:`read_regular` read is over its limit; ``limit`` is that limit in bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"over {_size(limit)}")
        self.limit = limit


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`), at most ``limit`` of them:
    :class:`NotRegularFile` for a FIFO, a device or a directory, :class:`FileTooLarge` past ``limit``, an
    OSError when it cannot be read.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = path.write_bytes(b"abc")
        >>> read_regular(path, 3)
        b'abc'
        >>> read_regular(path, 2)
        Traceback (most recent call last):
        ...
        torchwork.paths.FileTooLarge: over 2 bytes
    """
    descriptor = open_regular(path, follow_links=follow_links)
    try:
        data = read_at_most(descriptor, limit + 1)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise FileTooLarge(limit)
    return data


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit} bytes"


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words, for a message.

    >>> file_kind(stat.S_IFIFO)
    'FIFO'
    """
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


