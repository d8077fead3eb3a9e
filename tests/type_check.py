"""Run mypy on a user's script, as a user's editor or CI would: the errors it reports, one line each."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def type_errors(folder: Path, source: str) -> tuple[list[str], str]:
    """mypy's error lines for ``source`` (dedented, written to ``folder``), and its whole output."""
    script = folder / "user_script.py"
    script.write_text(textwrap.dedent(source))
    done = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                           "--no-incremental", "--no-error-summary", str(script)],
                          capture_output=True, text=True, cwd=folder, timeout=600)
    return [line for line in done.stdout.splitlines() if ": error:" in line], done.stdout
