"""A CPU-bound neighbour for the benchmarks that measure a busy machine: one process spinning on one core.

Example (not run here: it keeps a core busy for a second):
    with neighbour(seconds=1.0):
        ...  # timed beside it
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def neighbour(seconds: float = 900.0) -> Iterator[None]:
    """A CPU-bound process on one core, for at most ``seconds`` and stopped on exit."""
    process = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)])
    try:
        time.sleep(0.5)
        yield
    finally:
        process.kill()
        process.wait(timeout=10)
