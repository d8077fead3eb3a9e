"""Run a call that may block reading a FIFO so that a hang fails the test instead of hanging the run.

The ``within`` fixture's alarm cannot do it: it raises ``TimeoutError``, an ``OSError`` that code catching
``OSError`` around its read swallows, and native code blocked in ``open`` while holding the GIL (the tokenizers
library's ``from_file``) never lets the alarm's handler, or any other thread, run. So a second process
watches: past the time given, it opens each FIFO for writing and closes it again, the blocked reader sees the
end of the file, the call returns or raises, and the test fails saying it blocked.

Example:
    >>> returns_within(5, lambda: 42)
    42
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

# argv: seconds, then the FIFOs. Prints one line per release: a reader was waiting on that FIFO.
_RELEASER = """
import os, sys, time
time.sleep(float(sys.argv[1]))
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    for fifo in sys.argv[2:]:
        try:
            descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: no reader waits on it
        except OSError:
            continue
        print(fifo, flush=True)  # before the reader can see the end and the test kill this process
        os.close(descriptor)
    time.sleep(0.05)
"""


def returns_within(seconds: float, call: Callable[[], T], *fifos: Path) -> T:
    """``call()``'s result (or its exception) when it does not wait on any of ``fifos`` for more than
    ``seconds``; else the test fails, once the FIFO was released and the call came back."""
    releaser = subprocess.Popen([sys.executable, "-I", "-S", "-c", _RELEASER, str(seconds), *map(str, fifos)],
                                stdout=subprocess.PIPE, text=True)
    try:
        result = call()
    except BaseException:
        _fail_if_released(releaser, seconds)
        raise
    _fail_if_released(releaser, seconds)
    return result


def _fail_if_released(releaser: subprocess.Popen[str], seconds: float) -> None:
    releaser.kill()
    released, _ = releaser.communicate(timeout=30)
    if released:
        pytest.fail(f"the call blocked for more than {seconds:g} s reading a FIFO ({released.split()[0]})")
