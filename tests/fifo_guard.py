"""Run a call that may block reading a FIFO so that a hang fails the test instead of hanging the run.

The ``within`` fixture's alarm raises ``TimeoutError``, an ``OSError``: code that catches ``OSError`` around its
read (most code reading a file does) swallows it, and code in Rust or C never sees it. Here the call runs on a
thread; past its time every FIFO it may block on is opened for writing and closed, so the blocked reader sees
the end of it and the thread ends, and the test fails saying so.

Example:
    >>> returns_within(5, lambda: 42)
    42
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")


def returns_within(seconds: float, call: Callable[[], T], *fifos: Path) -> T:
    """``call()``'s result (its exception raised here) when it returns within ``seconds``; else each of
    ``fifos`` is released until the call ends, and the test fails."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="returns-within") as pool:
        future = pool.submit(call)
        try:
            return future.result(timeout=seconds)
        except concurrent.futures.TimeoutError:
            if future.done():  # the call itself raised TimeoutError
                raise
        deadline = time.monotonic() + 30
        while not future.done() and time.monotonic() < deadline:
            for fifo in fifos:
                _release(fifo)
            time.sleep(0.05)
        pytest.fail(f"the call blocked for more than {seconds:g} s (reading a FIFO: {', '.join(map(str, fifos))})")


def _release(fifo: Path) -> None:
    """Open ``fifo`` for writing and close it: a reader blocked opening or reading it sees its end."""
    try:
        descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader waits on it now (ENXIO), or it is gone
        return
    os.close(descriptor)
