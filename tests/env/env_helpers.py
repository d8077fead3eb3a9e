"""Running torchwork in a real subprocess for the env tests."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
FIXTURES = Path(__file__).with_name("fixtures")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KMP_DUPLICATE_LIB_OK", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")}
    env["PYTHONPATH"] = str(SRC)
    env.update(extra)
    return env


def run_python(code: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` with this checkout's torchwork first on the path."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=child_env(**extra))


def run_cli(*args: str, prelude: str = "", timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    """``torchwork ARGS`` in a subprocess, after running ``prelude`` (Python) in that same process."""
    code = f"{prelude}\nimport sys\nfrom torchwork.cli import main\nsys.exit(main({list(args)!r}))"
    return run_python(code, timeout=timeout, **extra)


def intel_openmp_library() -> Path | None:
    """The libiomp5.so that PyPI's intel-openmp installed, or None when it is not installed."""
    try:
        dist = metadata.distribution("intel-openmp")
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or []:
        if file.name == "libiomp5.so":
            return Path(dist.locate_file(file)).resolve()
    return None
