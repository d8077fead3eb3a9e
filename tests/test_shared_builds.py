"""A shared build is made once for all the processes that ask for it at once, and made again after a failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from shared_builds import SHARED, built_once

ASK = """
import sys, time
sys.path.insert(0, {tests!r})
from shared_builds import built_once

def build(folder):
    with open({log!r}, "a") as log:
        log.write("built\\n")
    time.sleep(0.5)  # the other processes ask while this one builds
    (folder / "weights.txt").write_text("42")

print((built_once("model", build) / "weights.txt").read_text())
"""


def test_processes_asking_at_once_get_one_build(tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    code = ASK.format(tests=str(Path(__file__).parent), log=str(log))
    env = {SHARED: str(tmp_path / "shared")}
    processes = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
                 for _ in range(3)]
    answers = [process.communicate(timeout=60)[0].strip() for process in processes]
    assert answers == ["42"] * 3 and log.read_text() == "built\n"


def test_a_failed_build_is_made_again_by_the_next_asker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARED, str(tmp_path / "shared"))

    def failing(folder: Path) -> None:
        (folder / "half-written").write_text("?")
        raise RuntimeError("the build broke")

    with pytest.raises(RuntimeError, match="the build broke"):
        built_once("model", failing)
    folder = built_once("model", lambda into: (into / "weights.txt").write_text("42"))
    assert sorted(path.name for path in folder.iterdir()) == [".built", "weights.txt"]  # nothing half-written kept
    assert built_once("model", failing) == folder  # built: not made again


def test_a_name_that_is_not_a_plain_word_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SHARED, str(tmp_path / "shared"))
    with pytest.raises(ValueError, match="letters, digits and '-'"):
        built_once("../elsewhere", lambda into: None)
