"""Reading ``--api-key-file``: a regular file of at most :data:`MAX_KEY_FILE_BYTES`, UTF-8 with or without a BOM.

The file is opened without blocking and checked from its own descriptor before a byte is read, so a FIFO
(which would hold the server's event loop at a SIGHUP), a device such as ``/dev/zero`` (which never ends), or a
link to either is refused with one :class:`~torchwork.errors.ConfigError` that names the path and what to do.
A file others may read is worth a warning, as an SSH key would be: :func:`permission_warning`.

Example:
    >>> import os, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "keys.txt"
    >>> _ = path.write_bytes(b"\\xef\\xbb\\xbfcorrect-horse-battery-staple\\n")
    >>> read_key_file(str(path))
    ['correct-horse-battery-staple']
    >>> os.chmod(path, 0o644)
    >>> permission_warning(str(path)).endswith(f"readable by other users (mode 644); make it private with: "
    ...                                        f"chmod 600 {path}")
    True
"""

from __future__ import annotations

import os
import stat

from torchwork.errors import ConfigError
from torchwork.paths import FileTooLarge, NotRegularFile, file_kind, read_regular

MAX_KEY_FILE_BYTES = 1 << 20  # 1 MiB: some ten thousand keys


def read_key_file(path: str) -> list[str]:
    """The lines of the key file ``path``; a :class:`~torchwork.errors.ConfigError` for anything but a readable
    regular UTF-8 file of at most :data:`MAX_KEY_FILE_BYTES` (a leading byte-order mark is dropped)."""
    try:
        data = read_regular(path, MAX_KEY_FILE_BYTES)
    except NotRegularFile as error:
        raise ConfigError(f"--api-key-file {path} is not a regular file (a {file_kind(error.mode)}); keys are "
                          "read only from a regular file: write one key a line into one") from None
    except FileTooLarge:
        raise ConfigError(f"--api-key-file {path} is larger than {MAX_KEY_FILE_BYTES} bytes; a key file holds one "
                          "key a line (or sha256:HEX digests), not more") from None
    except OSError as error:
        raise ConfigError(f"--api-key-file {path}: cannot read it ({error.strerror}); write one key a line") \
            from None
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"--api-key-file {path} is not UTF-8 text; write one key a line") from None


def permission_warning(path: str) -> str | None:
    """One line to warn with when users other than the owner may read the key file, else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if not mode & (stat.S_IRWXG | stat.S_IRWXO):
        return None
    return (f"--api-key-file {path} is readable by other users (mode {stat.S_IMODE(mode):o}); make it private "
            f"with: chmod 600 {path}")

