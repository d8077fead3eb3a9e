"""Fixtures shared by the doctor's tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from torchwork.doctor.runner import run_script

DoctorRun = Callable[[str], list[tuple[str, int | None]]]


@pytest.fixture
def doctor_findings(tmp_path: Path) -> DoctorRun:
    """A function that writes a script's text to the test's folder, runs it as ``torchwork doctor`` does, checks
    that it ended well with no error of the doctor's own, and returns its findings as (check id, line)."""
    def run(text: str) -> list[tuple[str, int | None]]:
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(text), encoding="utf-8")
        result = run_script(script)
        assert result.script_exit == 0 and not result.internal_errors
        return [(f.id, f.line) for f in result.findings]
    return run
