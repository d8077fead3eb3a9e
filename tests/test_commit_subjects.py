"""Commit subjects of at most 72 characters (CONTRIBUTING.md): what changed, in one line; the reasons and the
measured numbers go in the body. Checked over the history since BASE, the last commit before the rule was
enforced; a checkout without that history (an archive, a shallow clone) skips with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = "5554696"
LIMIT = 72
# Full hash -> why its subject stays longer. Empty: the two long subjects of 5 Dec (79 and 74 characters)
# were reworded before they were submitted.
KNOWN_LONG: dict[str, str] = {}


def long_subjects(lines: list[str], limit: int = LIMIT) -> list[str]:
    """``"hash (N characters): subject"`` for each ``"hash subject"`` line whose subject is over ``limit``."""
    found = []
    for line in lines:
        commit, _, subject = line.partition(" ")
        if len(subject) > limit and commit not in KNOWN_LONG:
            found.append(f"{commit[:10]} ({len(subject)} characters): {subject}")
    return found


def _history() -> list[str]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)

    if git("cat-file", "-e", f"{BASE}^{{commit}}").returncode != 0:
        pytest.skip(f"no git history back to {BASE} here (an archive or a shallow clone)")
    done = git("log", "--format=%H %s", f"{BASE}..HEAD")
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_commit_subjects_fit_in_72_characters() -> None:
    found = long_subjects(_history())
    assert not found, ("commit subjects over 72 characters (say what changed in one short line; reasons and "
                       "numbers go in the body; fix a local commit with git commit --amend):\n" + "\n".join(found))


def test_a_long_subject_is_found() -> None:
    assert long_subjects(["abc " + "x" * 72, "def " + "y" * 73]) == [f"def ({73} characters): {'y' * 73}"]
