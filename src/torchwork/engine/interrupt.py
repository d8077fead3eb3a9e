"""Ctrl-C during ``fit``: the step in progress finishes, a checkpoint is written, and training stops with
one line that says where and how to continue (``torchwork`` prints it and exits 130; so does your own
script run with ``python train.py``, through :func:`exit_as_interrupted_when_uncaught`).

The first SIGINT only sets a flag that the loop reads after each optimizer step, so the checkpoint holds a
consistent state (never half a step); a second one interrupts at once. The handler is installed only in the
main thread, when SIGINT still has Python's default handler (a user's own handler is left alone), and not
under DDP, where ranks would stop at different steps.

Example:
    >>> from torchwork.engine.interrupt import TrainingInterrupted
    >>> str(TrainingInterrupted(120, "runs/20260101T000000Z-abc123"))
    'interrupted at step 120; continue with: torchwork resume runs/20260101T000000Z-abc123'
    >>> str(TrainingInterrupted(7, None))
    'interrupted at step 7'
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C after step ``step``; ``run``: the run folder whose checkpoint continues it."""

    def __init__(self, step: int, run: Any) -> None:
        super().__init__(step, run)
        self.step, self.run = step, run

    def __str__(self) -> str:
        return f"interrupted at step {self.step}" + (f"; continue with: torchwork resume {self.run}"
                                                     if self.run is not None else "")


def exit_as_interrupted_when_uncaught() -> None:
    """Make a :class:`TrainingInterrupted` that nobody catches end the program as Ctrl-C ends a Python one.

    CPython ends a program killed by its own SIGINT (status 130 in a shell, no ``Exception ignored``) only
    for ``KeyboardInterrupt`` itself: a subclass ends in a traceback and status 1, against what the resume
    guide says. Installed once per process, chained to the ``sys.excepthook`` found: for our exception it
    prints the one line (where it stopped, how to continue), runs the ``atexit`` functions (a logger's
    flush), and ends the process by SIGINT; anything else goes to the previous hook. A notebook never calls
    ``sys.excepthook``, so an interrupted cell only shows the exception.
    """
    previous = sys.excepthook
    if getattr(previous, "torchwork_interrupt_hook", False):
        return

    def hook(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
        if not isinstance(value, TrainingInterrupted):
            previous(kind, value, traceback)
            return
        print(f"torchwork: {value}", file=sys.stderr)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)

    hook.torchwork_interrupt_hook = True  # type: ignore[attr-defined]
    sys.excepthook = hook


class InterruptFlag:
    """Set by the first SIGINT while :meth:`installed` is active."""

    def __init__(self) -> None:
        self.raised = False

    @contextlib.contextmanager
    def installed(self, enabled: bool = True) -> Iterator[InterruptFlag]:
        self.raised = False
        if (not enabled or threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            yield self
            return

        def handler(signum: int, frame: Any) -> None:
            if self.raised:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now
            self.raised = True

        exit_as_interrupted_when_uncaught()
        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)
