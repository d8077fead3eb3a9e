"""The C++ runner's build cache: a process that finds another one building the same entry waits for that build
and uses it, instead of compiling the same sources beside it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchwork.deploy import cpp_runner

ASK = """
import sys
from torchwork.deploy.cpp_runner import build_runner
build = build_runner(sys.argv[1], quiet=True)
print(build.cached, build.binary)
"""


def _waits_for_a_lock(pid: int) -> bool:
    """Whether the process is blocked on a file lock: the kernel lists a blocked request with "->"."""
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and f" {pid} " in line for line in lines)


@pytest.mark.skipif(any(shutil.which(tool) is None for tool in cpp_runner.TOOLS), reason="cmake, ninja and g++ "
                    "are not installed (sudo apt-get install cmake ninja-build g++; `make system-deps` does it)")
def test_a_second_builder_waits_for_the_first_and_uses_its_binary(tmp_path: Path) -> None:
    cache = tmp_path / "cpp-cache"
    cache.mkdir()
    target = cache / cpp_runner._build_key(cpp_runner._tools()["c++"])
    with open(cache / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # this test is "the first builder"
        waiter = subprocess.Popen([sys.executable, "-c", ASK, str(cache)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not _waits_for_a_lock(waiter.pid) and waiter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert waiter.poll() is None, waiter.communicate()
        assert _waits_for_a_lock(waiter.pid)
        assert not [path for path in cache.iterdir() if path.name.startswith(".build-")], "it did not start a build"
        target.mkdir()
        (target / cpp_runner.BINARY).write_text("#!/bin/sh\n")  # what the first builder's rename put in place
        os.chmod(target / cpp_runner.BINARY, 0o755)
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, err[-2000:]
    assert out.split() == ["True", str(target / cpp_runner.BINARY)]
