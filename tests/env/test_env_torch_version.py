"""torch's version and build read from the wheel's ``torch/version.py`` as data, without importing torch (what
``torchwork serve`` of an ONNX artifact compares with the exporter's): the real file, a CUDA and a ROCm build's,
and files that do not read so, for which torch is imported instead."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torchwork.env.versions import build_of_torch, read_torch_version_file


def _this_machine(extra_path: str | None = None) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom torchwork.env.drift import this_machine\nhere = this_machine()\n"
            "print(here['torch'], here['build'], 'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [extra_path, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_the_installed_torch_is_read_without_importing_it() -> None:
    done = _this_machine()
    import torch

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [torch.__version__, build_of_torch(torch), "False"]


@pytest.mark.parametrize(("version_py", "version", "build"), [
    ("from typing import Optional\n__version__ = '2.4.1+cu121'\ncuda: Optional[str] = '12.1'\n"
     "hip: Optional[str] = None\n", "2.4.1+cu121", "cuda 12.1"),
    ("__version__ = '2.3.0+rocm6.0'\ncuda = None\nhip = '6.0.32830'\n", "2.3.0+rocm6.0", "rocm 6.0"),
    ("__version__ = '2.13.0'\n", "2.13.0", "cpu"),
])
def test_a_builds_version_file_is_read_as_data(tmp_path, version_py, version, build) -> None:
    (tmp_path / "version.py").write_text(version_py)
    facts = read_torch_version_file(tmp_path / "version.py")
    assert (facts.__version__, build_of_torch(facts)) == (version, build)


def test_a_version_file_that_does_not_read_so_imports_torch_instead(tmp_path) -> None:
    # a torch package first on the path whose version.py computes its version: never run, and never trusted
    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text("__version__ = compute_it()\n")
    (package / "__init__.py").write_text("raise SystemExit('imported the torch package')\n")
    assert read_torch_version_file(package / "version.py") is None
    for broken in ("__version__ = '2.1\n", "cuda = '12.1'\n", b"\xff\xfe\x00"):
        (tmp_path / "broken.py").write_bytes(broken if isinstance(broken, bytes) else broken.encode())
        assert read_torch_version_file(tmp_path / "broken.py") is None, broken
    assert read_torch_version_file(tmp_path / "absent.py") is None
    assert read_torch_version_file(tmp_path) is None  # a folder
    (tmp_path / "huge.py").write_text("__version__ = '2.13.0'\n" + "#" * 70_000 + "\n")
    assert read_torch_version_file(tmp_path / "huge.py") is None
    done = _this_machine(str(tmp_path))
    assert "imported the torch package" in done.stderr
