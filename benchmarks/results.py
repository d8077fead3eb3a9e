"""Every benchmark ends with ``record(figures)``: it prints the figures as one JSON object (the benchmark's
output) and appends them to the log at the end of ``benchmarks/RESULTS.md`` with the date, the command, and
the machine's load while it ran, so that each figure there can be traced to a run.

``TORCHWORK_BENCH_NO_LOG=1`` prints without appending (a trial run you do not want to keep).
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("RESULTS.md")
LOG_HEADING = "## Log"


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load unknown"
    return f"load {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def record(figures: dict[str, Any], *, indent: int | None = None) -> None:
    """Print ``figures`` as JSON and append them, with the run's date, command and load, to RESULTS.md."""
    print(json.dumps(figures, indent=indent, default=str), flush=True)
    if os.environ.get("TORCHWORK_BENCH_NO_LOG"):
        return
    command = " ".join(["python", shlex.quote(os.path.relpath(sys.argv[0])), *map(shlex.quote, sys.argv[1:])])
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    entry = f"- {when}, `{command}`, {_load()}:\n  `{json.dumps(figures, default=str)}`\n"
    text = RESULTS.read_text() if RESULTS.exists() else f"# Benchmark results\n\n{LOG_HEADING}\n"
    if LOG_HEADING not in text:
        text = text.rstrip("\n") + f"\n\n{LOG_HEADING}\n"
    RESULTS.write_text(text.rstrip("\n") + "\n" + entry)
