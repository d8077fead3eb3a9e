"""This machine without torch: Python, OS, CPU (model, cores, the ISA flags that matter), installed
distributions and the environment variables that change how torch behaves.

Example:
    >>> from torchwork.env.machine import python_info
    >>> python_info()["implementation"]
    'CPython'
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import platform
import sys
from typing import Any

from torchwork.env.versions import canonical_name

# The CPU flags (as /proc/cpuinfo names them) that decide which kernels torch and oneDNN pick.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd", "sve")

BEHAVIOUR_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                       "OPENBLAS_NUM_THREADS", "KMP_DUPLICATE_LIB_OK", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
                       "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "LD_PRELOAD", "LD_LIBRARY_PATH",
                       "PYTHONHASHSEED", "HF_HUB_OFFLINE")
BEHAVIOUR_PREFIXES = ("TORCH_", "PYTORCH_", "CUDA_", "CUDNN_", "NCCL_", "OMP_", "KMP_", "MKL_", "OPENBLAS_",
                      "ORT_", "TORCHINDUCTOR_", "TORCHDYNAMO_")


def python_info() -> dict[str, Any]:
    """Version, implementation, executable, and the virtualenv or conda environment it runs in."""
    venv = sys.prefix if sys.prefix != sys.base_prefix else None
    conda = os.environ.get("CONDA_PREFIX") or (sys.prefix if os.path.isdir(os.path.join(sys.prefix, "conda-meta"))
                                               else None)
    return {"version": platform.python_version(), "implementation": platform.python_implementation(),
            "executable": sys.executable, "virtualenv": venv, "conda": conda}


def _cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor tells enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, or a cgroup CPU quota, whichever is smaller)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max", encoding="utf-8").read().split()[:2]
        if quota != "max":
            count = min(count, max(1, int(int(quota) / int(period) + 0.999)))
    except (OSError, ValueError):
        pass
    return count


def cpu_info() -> dict[str, Any]:
    """OS, CPU model, logical / physical / usable cores and ISA flags."""
    fields = _cpuinfo()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except ImportError:  # pragma: no cover - psutil is a dependency
        physical = None
    return {"os": platform.platform(), "system": platform.system(), "machine": platform.machine(),
            "model": fields.get("model name") or fields.get("Model") or platform.processor() or None,
            "logical_cores": os.cpu_count(), "physical_cores": physical, "usable_cpus": usable_cpus(),
            "isa": [flag for flag in ISA_FLAGS if flag in flags]}


def behaviour_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables set here that change what torch, OpenMP, BLAS or CUDA do."""
    environ = dict(os.environ if environ is None else environ)
    return {key: environ[key] for key in sorted(environ)
            if key in BEHAVIOUR_VARIABLES or key.startswith(BEHAVIOUR_PREFIXES)}


def installed_distributions() -> dict[str, str]:
    """``{canonical name: version}`` of every installed distribution (the first one on sys.path wins).

    Read from the ``name-version.dist-info`` folder names (a directory listing per path entry: a few
    milliseconds, cheap enough for every run manifest); a folder whose name does not say its version is
    read through importlib.metadata. Read again at each call, not cached: a long process (a notebook, a test
    session) whose packages or ``sys.path`` changed since its first run records what it runs with now.
    A folder inside a package is skipped: importing setuptools (as torch's C++ builds do) puts
    ``setuptools/_vendor`` on sys.path, whose dist-info folders are setuptools' private copies, not
    installed distributions.
    """
    found: dict[str, str] = {}
    for entry in sys.path:
        if _inside_a_package(entry):
            continue
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            stem, dot, suffix = name.rpartition(".")
            if suffix not in ("dist-info", "egg-info") or not dot:
                continue
            project, dash, version = stem.partition("-")
            if suffix == "egg-info" or not dash:
                try:
                    dist = metadata.Distribution.at(os.path.join(entry or ".", name))
                    project, version = dist.metadata["Name"] or "", dist.version
                except (OSError, ValueError, TypeError):
                    continue
            if project and version:
                found.setdefault(canonical_name(project), version)
    return dict(sorted(found.items()))


def _inside_a_package(entry: str) -> bool:
    """Whether the sys.path ``entry`` is a folder of an importable package (its parent has ``__init__.py``)."""
    return bool(entry) and os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(entry)), "__init__.py"))
