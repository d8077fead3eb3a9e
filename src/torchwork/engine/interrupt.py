"""Ctrl-C during ``fit``: the step in progress finishes, a checkpoint is written, and training stops with
one line that says where and how to continue (``torchwork`` prints it and exits 130).

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

import contextlib
import signal
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

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)
