"""A one-line progress bar on stderr, drawn only when stderr is a terminal.

Example:
    >>> import io
    >>> from torchwork.engine.progress import ProgressBar
    >>> bar = ProgressBar(total=10, stream=io.StringIO())
    >>> bar.enabled   # not a terminal: silent
    False
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Shows ``epoch  step/total  loss  samples/s``, redrawn at most ten times a second."""

    def __init__(self, total: int | None, desc: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total, self.desc = total, desc
        self.count = 0
        self.samples = 0
        self.start = self.last_draw = time.monotonic()

    def update(self, samples: int, loss: float | None = None) -> None:
        self.count += 1
        self.samples += samples
        now = time.monotonic()
        if now - self.last_draw < 0.1 and self.count != self.total:
            return
        self.last_draw = now
        rate = self.samples / max(now - self.start, 1e-9)
        total = f"/{self.total}" if self.total else ""
        loss_text = f"  loss {loss:.4f}" if loss is not None else ""
        self.stream.write(f"\r{self.desc} {self.count}{total}{loss_text}  {rate:,.0f} samples/s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.count:
            self.stream.write("\n")
            self.stream.flush()
