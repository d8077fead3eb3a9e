"""Shared fixtures for every test folder."""

from __future__ import annotations

import contextlib
import faulthandler
import signal
import sys
import threading
from collections.abc import Callable, Iterator

import pytest


@contextlib.contextmanager
def _within(seconds: float) -> Iterator[None]:
    """Fail (``TimeoutError``) when the block runs past ``seconds``, so a regression to quadratic or endless
    work fails the test instead of hanging the run. Python-level loops and ``re`` are interrupted by the
    alarm; a watchdog ends the process (with every thread's traceback) if C code ignores it."""
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - alarms need the main one
        yield
        return

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the block ran past its {seconds:g} s bound")

    faulthandler.dump_traceback_later(seconds * 4 + 30, exit=True, file=sys.__stderr__)
    previous = signal.signal(signal.SIGALRM, expired)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def within() -> Callable[[float], contextlib.AbstractContextManager[None]]:
    """``with within(5): ...`` fails the test with ``TimeoutError`` when the block takes longer than 5 s."""
    return _within
