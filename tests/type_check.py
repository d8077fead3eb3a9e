"""Run mypy on a user's script, as a user's editor or CI would: the errors it reports, one line each.

mypy reads torch's and torchwork's types once per session into a shared cache (11 s on this machine); each
check copies that cache and reads only the user's script (0.5 s), as a user's incremental mypy does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from shared_builds import built_once

_WARM_SOURCE = "import torch\nfrom torch import nn\nimport torchwork\nfrom torchwork import Trainer\n"


def _mypy(folder: Path, script: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                           "--cache-dir", str(cache), "--no-error-summary", str(script)],
                          capture_output=True, text=True, cwd=folder, timeout=600)


def _warm_cache(folder: Path) -> None:
    script = folder / "warm.py"
    script.write_text(_WARM_SOURCE)
    done = _mypy(folder, script, folder / "cache")
    if done.returncode != 0:
        raise RuntimeError(f"mypy failed on {_WARM_SOURCE!r}:\n{done.stdout}{done.stderr}")


def type_errors(folder: Path, source: str) -> tuple[list[str], str]:
    """mypy's error lines for ``source`` (dedented, written to ``folder``), and its whole output."""
    cache = shutil.copytree(built_once("mypy-cache", _warm_cache) / "cache", folder / "mypy-cache")
    script = folder / "user_script.py"
    script.write_text(textwrap.dedent(source))
    done = _mypy(folder, script, Path(cache))
    return [line for line in done.stdout.splitlines() if ": error:" in line], done.stdout
