"""Each printed line in one write, for processes that share a terminal or a log.

A tune worker, each rank of a DDP job and the serve model process share their parent's stdout and stderr.
With ``PYTHONUNBUFFERED`` set (many Docker images set it; pytest-xdist's workers do) Python's text streams
write through to the file, and ``print`` writes a line's text and its newline as two writes: another
process's line lands in between ("rank0 line 2616 xxxrank1 line 0 xxx", measured with two ranks under
``torchwork launch``). Line-buffered without write-through, a line and its newline leave in one write, still
at once (a newline or a carriage return flushes it).

Example:
    >>> import io
    >>> stream = io.TextIOWrapper(io.BytesIO(), write_through=True)
    >>> keep_lines_whole(stream); (stream.line_buffering, stream.write_through)
    (True, False)
"""

from __future__ import annotations

from typing import Any


def keep_lines_whole(*streams: Any) -> None:
    """Make each of ``streams`` (``sys.stdout``, ``sys.stderr``) write a printed line in one piece. A stream
    that cannot be reconfigured (replaced by a test harness or a logger) is left as it is."""
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(line_buffering=True, write_through=False)
