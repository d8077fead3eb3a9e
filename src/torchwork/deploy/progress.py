"""Plain progress lines while an export or a verification runs: what it does now (which variant, which
batch size, how many rows), said when a stage starts and again every few seconds while it lasts.

A heartbeat thread writes the lines, so a long call that cannot report (a quantizer's calibration, one
large batch) still gets its line at a steady pace. Code reports through :func:`stage` and :func:`rows`,
which do nothing (a dict write) when no export is showing progress.

Example:
    >>> lines = []
    >>> with showing_progress("export", every_s=60, write=lines.append):
    ...     stage("parity", variant="onnx", batch=64, total=256)
    ...     rows(128)
    >>> lines[0]
    'export: parity: onnx at batch 64, 0/256 rows (0 s)'
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

EVERY_S = 5.0  # the goal: a line at least every 10 s

_active: list[_Progress] = []


class _Progress:
    def __init__(self, label: str, every_s: float, write: Callable[[str], Any]) -> None:
        self.label, self.every_s, self.write = label, every_s, write
        self.started = time.monotonic()
        self.state: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.last = self.started  # the first line comes with the first stage

    def line(self) -> str:
        state = self.state
        parts = [f"{self.label}: {state.get('stage', 'working')}"]
        where = " ".join(p for p in (state.get("variant") or "",
                                     f"at batch {state['batch']}" if state.get("batch") else "") if p)
        done = (f"{state.get('done', 0):,}/{state['total']:,} {state.get('unit', 'rows')}" if state.get("total")
                else "")
        detail = ", ".join(p for p in (where, done) if p)
        return f"{parts[0]}{': ' + detail if detail else ''} ({time.monotonic() - self.started:.0f} s)"

    def say(self) -> None:
        with self.lock:
            self.last = time.monotonic()
            self.write(self.line())

    def beat(self) -> None:
        while not self.stopped.wait(min(1.0, self.every_s)):
            if time.monotonic() - self.last >= self.every_s:
                self.say()


@contextlib.contextmanager
def showing_progress(label: str, every_s: float | None = None,
                     write: Callable[[str], Any] | None = None) -> Iterator[None]:
    """Show progress lines (default: on stderr, every :data:`EVERY_S`) while the block runs; nested calls
    keep the outer one's."""
    if _active:
        yield
        return
    progress = _Progress(label, EVERY_S if every_s is None else every_s, write or (lambda line: print(line, file=sys.stderr, flush=True)))
    _active.append(progress)
    thread = threading.Thread(target=progress.beat, name="torchwork-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        progress.stopped.set()
        thread.join()
        _active.remove(progress)


def stage(name: str, *, variant: str | None = None, batch: int | None = None, total: int | None = None,
          unit: str = "rows") -> None:
    """A new stage (said at once): its name, the variant and batch size it runs, the rows it will do."""
    if _active:
        progress = _active[0]
        progress.state = {"stage": name, "variant": variant, "batch": batch, "total": total, "done": 0,
                          "unit": unit}
        progress.say()


def rows(done: int) -> None:
    """How many rows (or rounds) of the current stage are done."""
    if _active:
        _active[0].state["done"] = done
