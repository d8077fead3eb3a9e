"""The environment snapshot: this machine, its Python, torch build, GPUs, threads and native libraries.

:func:`snapshot` is the full report of ``torchwork env`` (``--json`` writes it); :func:`compact_snapshot`
is the part every run manifest and artifact manifest records (a few milliseconds: no threadpoolctl, no
file lists, no CUDA initialisation), and which ``torchwork env diff`` compares. Both share the top-level
keys ``python``, ``implementation``, ``platform``, ``torch``, ``build``, ``cuda``, ``cudnn``, ``openmp``
and ``packages``; the full snapshot adds ``details`` and ``findings``.

Example:
    >>> from torchwork.env.report import compact_snapshot
    >>> snap = compact_snapshot()
    >>> snap["torchwork_env"], snap["build"] in ("cpu",) or snap["build"].startswith(("cuda", "rocm"))
    (1, True)
"""

from __future__ import annotations

import ctypes
import importlib.metadata as metadata
import os
import platform
import re
import time
from typing import Any

from torchwork.env.libraries import openmp_runtimes_fast, runtime_libraries
from torchwork.env.machine import behaviour_variables, cpu_info, installed_distributions, python_info
from torchwork.env.versions import build_of_torch, canonical_name

SCHEMA = 1
# Packages torchwork's work rests on besides torch's own requirements.
PACKAGES_OF_INTEREST = ("numpy", "onnx", "onnxruntime", "onnxscript", "safetensors", "threadpoolctl", "psutil",
                        "scikit-learn", "triton", "intel-openmp", "mkl")


def compact_snapshot() -> dict[str, Any]:
    """The few facts that decide whether two machines compute alike (for manifests and ``env diff``)."""
    import torch

    cudnn = None
    if torch.version.cuda and torch.backends.cudnn.is_available():
        cudnn = torch.backends.cudnn.version()
    return {"torchwork_env": SCHEMA, "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": f"{platform.system()}-{platform.machine()}", "torch": torch.__version__,
            "build": build_of_torch(torch), "cuda": torch.version.cuda, "cudnn": cudnn,
            "openmp": openmp_runtimes_fast(), "packages": installed_distributions()}


def cuda_driver_version() -> str | None:
    """The CUDA version the installed NVIDIA driver supports (``cuDriverGetVersion``), or None."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        value = ctypes.c_int()
        if library.cuDriverGetVersion(ctypes.byref(value)) == 0 and value.value:
            return f"{value.value // 1000}.{value.value % 1000 // 10}"
    return None


def torch_info() -> dict[str, Any]:
    """torch's version, build, CUDA / ROCm / cuDNN, GPUs, threads and BLAS."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    available = torch.cuda.is_available()
    gpus = []
    for index in range(torch.cuda.device_count() if available else 0):
        props = torch.cuda.get_device_properties(index)
        gpus.append({"index": index, "name": props.name, "capability": f"{props.major}.{props.minor}",
                     "memory_gib": round(props.total_memory / 2**30, 1)})
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"version": torch.__version__, "build": build_of_torch(torch), "git": torch.version.git_version,
            "debug": bool(torch.version.debug), "cuda_runtime": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None), "cudnn": cudnn, "cuda_available": available,
            "cuda_driver": cuda_driver_version(), "gpus": gpus,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "blas": blas.group(1) if blas else None,
            "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available(),
            "openmp": torch.backends.openmp.is_available(),
            "threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}}


def numpy_info() -> dict[str, Any]:
    """NumPy's version and the BLAS it was built with."""
    try:
        import numpy
    except ImportError:
        return {"version": None, "blas": None}
    blas = None
    try:
        config = numpy.show_config(mode="dicts")  # NumPy >= 1.25
        found = config.get("Build Dependencies", {}).get("blas", {})
        blas = " ".join(str(found[k]) for k in ("name", "version") if found.get(k)) or None
    except (TypeError, AttributeError, ValueError):
        pass
    return {"version": numpy.__version__, "blas": blas}


def packages_of_interest(packages: dict[str, str]) -> dict[str, str | None]:
    """Versions of torch's own requirements and of the packages torchwork relies on."""
    names = []
    for requirement in metadata.requires("torch") or []:
        if "extra ==" not in requirement:
            names.append(canonical_name(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0]))
    names += [canonical_name(n) for n in PACKAGES_OF_INTEREST]
    return {name: packages.get(name) for name in dict.fromkeys(names)
            if packages.get(name) or name in PACKAGES_OF_INTEREST[:5]}


def snapshot() -> dict[str, Any]:
    """The full ``torchwork env`` report as data (``--json``), findings included."""
    from torchwork.env.rules import environment_findings

    compact = compact_snapshot()
    libraries = runtime_libraries()
    compact["openmp"] = sorted({os.path.basename(e["path"]) for e in libraries if e["kind"] == "openmp"})
    details = {"python": python_info(), "machine": cpu_info(), "torch": torch_info(), "numpy": numpy_info(),
               "libraries": libraries, "packages_of_interest": packages_of_interest(compact["packages"]),
               "variables": behaviour_variables()}
    snap = {**compact, "taken_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "details": details}
    snap["findings"] = [f.to_dict() for f in environment_findings(snap)]
    return snap


def _or(value: Any, missing: str = "none") -> str:
    return missing if value in (None, "", [], {}) else str(value)


def format_report(snap: dict[str, Any]) -> str:
    """One screen: the snapshot in readable lines, then the findings."""
    from torchwork.env.findings import Finding, format_findings

    d = snap["details"]
    py, cpu, t, np_ = d["python"], d["machine"], d["torch"], d["numpy"]
    where = (f"virtualenv {py['virtualenv']}" if py["virtualenv"] else "") + (
        f" conda {py['conda']}" if py["conda"] else "")
    gpus = "; ".join(f"{g['index']}: {g['name']} (sm {g['capability']}, {g['memory_gib']} GiB)" for g in t["gpus"])
    lines = [
        f"python     {py['version']} {py['implementation']}  {py['executable']}" + (f"  ({where.strip()})"
                                                                                  if where else ""),
        f"os         {cpu['os']}",
        f"cpu        {_or(cpu['model'], '?')}: {cpu['logical_cores']} logical, {_or(cpu['physical_cores'], '?')} "
        f"physical, {cpu['usable_cpus']} usable; {' '.join(cpu['isa']) or 'no notable ISA flags'}",
        f"torch      {t['version']}  build {t['build']}  git {str(t['git'])[:10]}  cpu kernels "
        f"{t['cpu_capability']}  BLAS {_or(t['blas'])}{'  (debug build)' if t['debug'] else ''}",
        f"cuda       runtime {_or(t['cuda_runtime'] or t['hip'])}  driver {_or(t['cuda_driver'])}  "
        f"cudnn {_or(t['cudnn'])}  gpus {gpus or 'none usable'}",
        f"threads    intra-op {t['threads']['intra_op']}, inter-op {t['threads']['inter_op']}",
        "libraries  (OpenMP and BLAS loaded in this process)",
    ]
    for lib in d["libraries"]:
        version = f" {lib['version']}" if lib["version"] else ""
        owner = f"from {lib['distribution']}" if lib["distribution"] else "not from a Python distribution"
        threads = f", {lib['threads']} threads" if lib["threads"] else ""
        lines.append(f"  {lib['kind']:<7} {lib['runtime']}{version}{threads}, {owner}")
        lines.append(f"          {lib['path']}")
    lines.append(f"numpy      {_or(np_['version'])}  BLAS {_or(np_['blas'], '?')}")
    interest = ", ".join(f"{k} {v}" for k, v in d["packages_of_interest"].items() if v)
    missing = ", ".join(k for k, v in d["packages_of_interest"].items() if not v)
    lines.append(f"packages   {interest}" + (f"; not installed: {missing}" if missing else ""))
    lines.append(f"           {len(snap['packages'])} distributions in all (`torchwork env lock` pins them)")
    variables = d["variables"]
    lines.append("variables  " + (" ".join(f"{k}={v}" for k, v in variables.items()) if variables
                                  else "none of the behaviour-changing ones are set"))
    findings = [Finding(**f) for f in snap["findings"]]
    lines.append("")
    lines.append(format_findings(findings) if findings else "no findings")
    return "\n".join(lines)


def main_report(as_json: bool) -> int:
    """``torchwork env``: print the report (or the JSON snapshot); exit 1 when a finding is an error."""
    import json

    snap = snapshot()
    print(json.dumps(snap, indent=2) if as_json else format_report(snap))
    return 1 if any(f["severity"] == "error" for f in snap["findings"]) else 0
