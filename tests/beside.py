"""Run a main command with checks beside it, not before it: ``make test``'s type check and docs build.

The suite leaves the two cores about a third idle (GNU time over a whole ``bash .ci/run``: 124-127% CPU of
200%, with tests waiting on servers, subprocesses and timers), while mypy and Sphinx, each on one core, took
about a minute in front of it. Beside it they fill time the tests leave idle. Each side command's output is
kept in a temporary file and printed only when it fails (or always with ``--show``); the exit status is the
main command's, or 1 when it passed and a side command failed.

Usage: ``python tests/beside.py "mypy" "sphinx-build -q -W docs docs/_build/html" -- pytest -q ...``

Example:
    >>> run(["echo checked; exit 3"], [sys.executable, "-c", "pass"])
    beside: `echo checked; exit 3` failed (exit status 3):
    checked
    1
"""

from __future__ import annotations

import subprocess
import sys
import tempfile


def run(side: list[str], main: list[str], show: bool = False) -> int:
    """Start each of ``side`` (shell command lines), run ``main`` in the foreground, then wait for ``side``."""
    started = []
    for command in side:
        log = tempfile.TemporaryFile()
        started.append((command, log, subprocess.Popen(
            command, shell=True, stdout=log, stderr=subprocess.STDOUT)))
    sys.stdout.flush()
    status = subprocess.call(main)
    failed = False
    for command, log, process in started:
        code = process.wait()
        log.seek(0)
        said = log.read().decode(errors="replace")
        log.close()
        if code != 0:
            failed = True
            print(f"beside: `{command}` failed (exit status {code}):\n{said.rstrip()}", flush=True)
        elif show:
            print(f"beside: `{command}` passed\n{said.rstrip()}", flush=True)
    return status if status != 0 else int(failed)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    split = argv.index("--")
    side, command = argv[:split], argv[split + 1:]
    show = "--show" in side
    return run([c for c in side if c != "--show"], command, show)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
