"""`env lock` does not pin an editable torchwork; `env ... | head` ends without a traceback; the repository's
lock file says which Python it was made with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from torchwork.env.lock import lock_text

ROOT = Path(__file__).resolve().parents[2]


def test_an_editable_install_is_not_pinned():
    text = lock_text()
    editable = [line.split()[1].split("==")[0] for line in text.splitlines() if "(editable): not pinned" in line]
    pinned = {line.split("==")[0].lower() for line in text.splitlines() if line and not line.startswith("#")}
    assert editable, "this checkout runs torchwork from its source folder"
    assert not {name.lower() for name in editable} & pinned


def test_a_closed_pipe_ends_quietly():
    process = subprocess.Popen([sys.executable, "-m", "torchwork.cli", "env", "lock"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # like `| head` that has read what it wanted
    err = process.stderr.read().decode()
    process.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert process.returncode == 141


def test_the_repository_lock_file_records_its_python():
    lines = (ROOT / "requirements" / "lock.txt").read_text().splitlines()
    assert any(line.startswith("# python: 3.") for line in lines)
