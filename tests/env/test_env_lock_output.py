"""``torchwork env lock -o PATH``: a PATH that cannot become a file (a directory, a path under a file) is one
line, before the environment is read or anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

import torchwork.env.lock as lock
from torchwork.cli import main


@pytest.fixture
def pins(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``lock_text`` recorded (and cheap): a refused path must not reach it."""
    calls: list[str] = []

    def lock_text() -> str:
        calls.append("read")
        return "# python: 3\nnumpy==2.0\n"

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    monkeypatch.setattr(lock, "lock_text", lock_text)
    return calls


@pytest.mark.parametrize("where, words", [
    ("folder", "is a directory; give a file name for the lock file, e.g. env lock -o "),
    ("file/lock.txt", "is not a directory, so the lock file cannot be written under it"),
])
def test_an_output_that_cannot_be_a_file_is_one_line(tmp_path: Path, capsys, pins: list[str], where: str,
                                                     words: str) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("")
    assert main(["env", "lock", "-o", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchwork: error: env lock -o "), err
    assert words in err[0], err[0]
    assert pins == [] and sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]
    assert list((tmp_path / "folder").iterdir()) == []


def test_an_output_file_in_a_new_folder_is_written(tmp_path: Path, capsys, pins: list[str]) -> None:
    assert main(["env", "lock", "-o", str(tmp_path / "new" / "lock.txt")]) == 0
    assert (tmp_path / "new" / "lock.txt").read_text() == "# python: 3\nnumpy==2.0\n"
    assert "1 pins" in capsys.readouterr().err
