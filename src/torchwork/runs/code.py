"""The code a run ran: the git commit and, when the work tree is dirty, the patch itself.

``dirty: true`` says only that something was changed; the patch says what. It is saved as ``code.patch``
in the run folder (``git diff HEAD --binary``: staged and unstaged changes to tracked files), with its
SHA-256 and the files it touches in the manifest; untracked files are listed by name.

Example:
    >>> patch_files("diff --git a/src/x.py b/src/x.py\\n--- a/src/x.py\\n+++ b/src/x.py\\n")
    ['src/x.py']
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any

PATCH_FILE = "code.patch"
MAX_PATCH_BYTES = 32 * 2**20  # a bigger "patch" is a vendored tree or data committed by mistake
MAX_LISTED = 50
_DIFF_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$", re.MULTILINE)


def _git(cwd: str | Path | None, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                              encoding="utf-8", errors="surrogateescape")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def patch_files(patch: str) -> list[str]:
    """The files a ``git diff`` patch touches, in order."""
    return list(dict.fromkeys(match.group(2) for match in _DIFF_HEADER.finditer(patch)))


def record_code(run: Path, cwd: str | Path | None = None) -> dict[str, Any]:
    """The commit, whether tracked files differ from it, and the patch saved as ``run/code.patch``
    (``{"commit": None, "dirty": None}`` outside a git work tree)."""
    commit = _git(cwd, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    patch = _git(cwd, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff") or ""
    untracked = (_git(cwd, "ls-files", "--others", "--exclude-standard") or "").splitlines()
    recorded: dict[str, Any] = {"commit": commit.strip(), "dirty": bool(patch)}
    if untracked:
        recorded["untracked"] = untracked[:MAX_LISTED] + ([f"... {len(untracked) - MAX_LISTED} more"]
                                                          if len(untracked) > MAX_LISTED else [])
    if not patch:
        return recorded
    data = patch.encode("utf-8", "surrogateescape")
    recorded.update(patch_sha256=hashlib.sha256(data).hexdigest(), patch_bytes=len(data),
                    patch_files=patch_files(patch))
    if len(data) > MAX_PATCH_BYTES:
        recorded["patch"] = None
        recorded["why"] = f"the patch is {len(data) / 2**20:.0f} MiB, over {MAX_PATCH_BYTES >> 20} MiB: not saved"
        return recorded
    from torchwork.files import atomic_write

    with atomic_write(run / PATCH_FILE, "wb") as handle:
        handle.write(data)
    recorded["patch"] = PATCH_FILE
    return recorded
