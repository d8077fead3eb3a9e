"""A tune worker shares its parent's stdout: each line must leave in one write, or the parent's "trial N
COMPLETE" line lands inside a worker's line (seen in CI, where pytest-xdist sets PYTHONUNBUFFERED=1, as many
Docker images do). Under PYTHONUNBUFFERED, Python's stdout is a text layer writing through to the raw file,
modelled here by a raw stream that records each write."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from torchwork.whole_lines import keep_lines_whole


class RecordingRaw(io.RawIOBase):
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.writes.append(bytes(data))
        return len(data)


def test_under_pythonunbuffered_a_printed_line_is_one_write_once_kept_whole() -> None:
    raw = RecordingRaw()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # what -u / PYTHONUNBUFFERED makes
    print("precision: 32 (as configured)", file=stream, flush=True)
    assert raw.writes == [b"precision: 32 (as configured)", b"\n"]  # the gap a parent's line fell into
    raw.writes.clear()
    keep_lines_whole(stream)
    print("precision: 32 (as configured)", file=stream, flush=True)
    print("epoch 1", file=stream)
    assert raw.writes == [b"precision: 32 (as configured)\n", b"epoch 1\n"]


def test_python_writes_through_under_pythonunbuffered_as_modelled() -> None:
    """The model above is Python's own stdout under PYTHONUNBUFFERED: raw file, write-through text layer."""
    code = "import sys; print(type(sys.stdout.buffer).__name__, sys.stdout.write_through)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.stdout.split() == ["FileIO", "True"], done.stdout + done.stderr
