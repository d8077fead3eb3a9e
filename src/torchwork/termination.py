"""SIGTERM as an exit that cleans up: ``finally`` blocks and ``with`` exits run, so a command stopped by a
process manager (``kill``, ``timeout``, a container stopping) leaves no temp folder behind.

Python's default for SIGTERM ends the process at once, with no ``finally``; Ctrl-C (SIGINT) already raises
``KeyboardInterrupt``. Within :func:`sigterm_as_exit`, SIGTERM raises ``SystemExit(143)`` (128 + 15, the
status a shell reports for it) in the main thread, and the previous handler is restored on leaving. Outside
the main thread, where Python cannot install a handler, nothing changes.

Example:
    >>> import os, signal
    >>> try:
    ...     with sigterm_as_exit():
    ...         os.kill(os.getpid(), signal.SIGTERM)
    ...         signal.pause() if hasattr(signal, "pause") else None
    ... except SystemExit as stopped:
    ...     stopped.code
    143
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

TERMINATED = 128 + signal.SIGTERM


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(TERMINATED)


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit(143)`` in the main thread (see the module's docstring)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
