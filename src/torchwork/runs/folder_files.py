"""Reading a file of a run folder without trusting it: a regular file inside the folder, of bounded size,
JSON of bounded depth.

A run folder is data anyone may have written or damaged. ``runs ls/show/diff`` must list a bad folder as
unreadable, not hang or die on it: a FIFO would block the reader for ever, a link to ``/dev/zero`` would be
read until memory runs out, a link out of the folder would show another file as the run's, JSON nested
100,000 deep exhausts the parser's stack, and a 5,000-digit number is refused by Python's ``int``. Each of
these is a one-line :class:`~torchwork.errors.ConfigError` here, naming the file and why.

Example:
    >>> import os, pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "ok.json").write_text('{"a": [1, 2]}')
    >>> load_json(read_run_file(run, "ok.json", 1024), run / "ok.json")
    {'a': [1, 2]}
    >>> os.mkfifo(run / "pipe")
    >>> read_run_file(run, "pipe", 1024)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: .../pipe is a FIFO, not a regular file: a run folder's files are regular files...
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any

from torchwork.errors import ConfigError
from torchwork.paths import NotRegularFile, open_regular

MAX_JSON_DEPTH = 64  # a manifest nests about 6 deep; far deeper is not one
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def open_run_file(run: str | os.PathLike[str], relative: str | os.PathLike[str]) -> IO[bytes]:
    """``run/relative`` opened for reading, when it is a regular file inside ``run`` (a link may lead only to
    one); a ConfigError otherwise, an OSError when it cannot be opened (missing)."""
    path = Path(run) / relative
    real_run, real = os.path.realpath(run), os.path.realpath(path)
    if os.path.commonpath([real_run, real]) != real_run:
        raise ConfigError(f"{path} is a link leading out of its run folder (to {real}): refused. A run folder's "
                          "files are its own; replace the link with the file.")
    _refuse_special(path, os.stat(real).st_mode)  # before opening: refused by its stat, unopened
    try:
        descriptor = open_regular(real, follow_links=False)  # the file opened is the one checked
    except NotRegularFile as error:
        _refuse_special(path, error.mode)
        raise
    return os.fdopen(descriptor, "rb")


def _refuse_special(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise ConfigError(f"{path} is {kind}, not a regular file: a run folder's files are regular files "
                          "(refused, it is not read). Remove it or restore the file from a copy.")


def read_run_file(run: str | os.PathLike[str], relative: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of :func:`open_run_file`, at most ``limit`` of them (a larger file is a ConfigError)."""
    with open_run_file(run, relative) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"{Path(run) / relative} is over {_size(limit)}, more than this file of a run can be: "
                          "it is not one (refused, not read).")
    return data


def _size(count: int) -> str:
    return f"{count / 2**20:.0f} MiB" if count >= 2**20 else f"{count:,} bytes"


def load_json(data: bytes, path: str | os.PathLike[str]) -> Any:
    """``data`` parsed as JSON, nested at most :data:`MAX_JSON_DEPTH` deep (NaN and Infinity are read, as
    Python writes them); a ConfigError naming ``path`` for what is not JSON or nests deeper."""
    try:
        value = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise _too_deep(path) from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
    except json.JSONDecodeError:
        raise
    except ValueError as error:  # an integer of more digits than Python converts (4300 by default)
        raise ConfigError(f"{path} holds a value Python cannot read ({str(error).split(';')[0]}): it was not "
                          "written by torchwork. Restore it from a copy, or remove the run folder.") from None
    if _depth_over(value, MAX_JSON_DEPTH):
        raise _too_deep(path)
    return value


def _too_deep(path: str | os.PathLike[str]) -> ConfigError:
    return ConfigError(f"{path} nests more than {MAX_JSON_DEPTH} levels deep: it was not written by torchwork. "
                       "Restore it from a copy, or remove the run folder.")


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item))
    return False
