"""Training progress on stderr: a redrawn bar on a terminal, plain lines everywhere else.

Where stderr is not a terminal (CI, ``| tee``, nohup, a pipe), a ``\\r`` bar would be one endless line, so a
plain line is printed every ``every_s`` seconds (default 30, or env ``TORCHWORK_PROGRESS_EVERY``) and at the
end of each epoch: epoch, step, samples/s, loss and the time left for the whole fit.

Example:
    >>> import io
    >>> from torchwork.engine.progress import ProgressBar
    >>> log = io.StringIO()
    >>> bar = ProgressBar(total=10, stream=log, epoch=0, epochs=2, every_s=3600)
    >>> bar.style   # not a terminal: plain lines
    'lines'
    >>> for _ in range(10):
    ...     bar.update(32, 0.5)
    >>> bar.close()
    >>> log.getvalue().startswith("epoch 1/2 done  step 10/10  ")
    True
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

DEFAULT_EVERY_S = 30.0


def default_every_s() -> float:
    """Seconds between plain progress lines: env ``TORCHWORK_PROGRESS_EVERY``, else 30."""
    value = os.environ.get("TORCHWORK_PROGRESS_EVERY")
    try:
        seconds = float(value) if value else DEFAULT_EVERY_S
    except ValueError:
        seconds = DEFAULT_EVERY_S
    return seconds if seconds > 0 else DEFAULT_EVERY_S


def format_duration(seconds: float) -> str:
    """``75`` -> ``'1m15s'``; ``3725`` -> ``'1h02m'``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Say:
    """A line on stderr beside the progress (a decision taken, an evaluation, why training stopped), printed
    only while ``shown()`` is true: asked at each line, so that it follows a setting replaced between fits.

    Example:
        >>> Say(lambda: False)("not printed")
    """

    def __init__(self, shown: Callable[[], bool]) -> None:
        self.shown = shown

    def __call__(self, line: str) -> None:
        if self.shown():
            print(line, file=sys.stderr, flush=True)


class ProgressBar:
    """One epoch's progress: ``epoch  step/total  loss  samples/s`` on a terminal, plain lines elsewhere.

    ``enabled=None``: always on (a bar on a terminal, lines elsewhere); ``False``: silent. ``loss`` may be
    a tensor: it is read (a device sync) only when a line is drawn.
    """

    def __init__(self, total: int | None, desc: str = "", stream: TextIO | None = None,
                 enabled: bool | None = None, *, epoch: int | None = None, epochs: int | None = None,
                 every_s: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled is not False
        isatty = getattr(self.stream, "isatty", None)
        self.style = "bar" if callable(isatty) and isatty() else "lines"
        self.total, self.epoch, self.epochs = total, epoch, epochs
        self.desc = desc or (f"epoch {epoch + 1}/{epochs}" if epoch is not None and epochs else "")
        self.every_s = every_s if every_s is not None else default_every_s()
        self.count = 0
        self.samples = 0
        self.loss: Any = None
        self.start = self.last_draw = time.monotonic()

    def update(self, samples: int, loss: Any = None) -> None:
        self.count += 1
        self.samples += samples
        self.loss = loss
        if not self.enabled:
            return
        now = time.monotonic()
        if self.style == "bar":
            if now - self.last_draw >= 0.1 or self.count == self.total:
                self.last_draw = now
                self.stream.write(f"\r{self._text(now)} ")
                self.stream.flush()
        elif now - self.last_draw >= self.every_s:
            self.last_draw = now
            self.stream.write(self._text(now) + "\n")
            self.stream.flush()

    def _text(self, now: float, done: bool = False) -> str:
        elapsed = max(now - self.start, 1e-9)
        parts = [f"{self.desc}{' done' if done else ''}".strip()]
        parts.append(f"step {self.count}/{self.total}" if self.total else f"step {self.count}")
        parts.append(f"{self.samples / elapsed:,.0f} samples/s")
        if self.loss is not None:
            parts.append(f"loss {float(self.loss):.4f}")
        eta = self._eta(elapsed)
        if eta is not None:
            parts.append(f"ETA {format_duration(eta)}")
        return "  ".join(p for p in parts if p)

    def _eta(self, elapsed: float) -> float | None:
        """Seconds left in the whole fit, at this epoch's pace (None when the length is unknown)."""
        if not self.total or not self.count:
            return None
        per_step = elapsed / self.count
        later_epochs = (self.epochs - self.epoch - 1) if self.epochs is not None and self.epoch is not None else 0
        return per_step * (self.total - self.count + max(0, later_epochs) * self.total)

    def close(self) -> None:
        if not self.enabled or not self.count:
            return
        if self.style == "bar":
            self.stream.write("\n")
        else:
            self.stream.write(self._text(time.monotonic(), done=True) + "\n")
        self.stream.flush()


def epoch_line(epoch: int, epochs: int | None, logs: dict[str, Any]) -> str:
    """The line printed after an epoch's validation: its number (1-based) and every ``val_`` metric.

    >>> epoch_line(3, 8, {"train_loss": 0.5, "val_loss": 0.8123, "val_macro_f1": 0.63456})
    'epoch 3/8 validation  loss 0.8123  macro_f1 0.6346'
    """
    return evaluation_line(f"epoch {epoch}{f'/{epochs}' if epochs else ''}", logs)


def evaluation_line(where: str, logs: dict[str, Any]) -> str:
    """The line printed after an evaluation: where training was, every ``val_`` metric (named without
    its prefix) and every metric of a named set (``train/loss``, as logged).

    >>> evaluation_line("step 250/2000", {"step": 250, "train/loss": 1.25, "val/loss": 1.5})
    'step 250/2000 validation  train/loss 1.2500  val/loss 1.5000'
    """
    values = "  ".join(f"{name[4:] if name.startswith('val_') else name} {float(value):.4f}"
                       for name, value in logs.items()
                       if (name.startswith("val_") or "/" in name) and isinstance(value, (int, float)))
    return f"{where} validation  {values}"
