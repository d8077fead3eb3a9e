"""The problems a snapshot shows, as findings with a fix: pure functions of the snapshot's data.

Example:
    >>> from torchwork.env.rules import threads_findings
    >>> snap = {"details": {"machine": {"usable_cpus": 2}, "torch": {"threads": {"intra_op": 8, "inter_op": 1}},
    ...         "variables": {}}}
    >>> [f.id for f in threads_findings(snap)]
    ['threads-oversubscribed']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchwork.env.findings import Finding, sort_findings
from torchwork.env.versions import build_family, major_minor

DUPLICATE_OK_WHY = (
    "KMP_DUPLICATE_LIB_OK=TRUE only silences Intel OpenMP's refusal to start beside another copy: both "
    "runtimes then run their own thread pools and thread-local state in one process, which oversubscribes "
    "the cores and can crash or return wrong results. It hides the fault instead of fixing it.")


def _owner(lib: dict[str, Any]) -> str:
    return f"from {lib['distribution']}" if lib.get("distribution") else "not from a Python distribution"


def openmp_findings(snap: dict[str, Any]) -> list[Finding]:
    """Two or more OpenMP runtimes in one process (naming both files and both packages)."""
    libraries = [lib for lib in snap["details"]["libraries"] if lib["kind"] == "openmp"]
    findings = []
    if len(libraries) > 1:
        families = {lib["runtime"] for lib in libraries}
        names = "; ".join(f"{lib['runtime']} at {lib['path']} ({_owner(lib)})" for lib in libraries)
        mixed = len(families) > 1
        owners = sorted({lib["distribution"].split()[0] for lib in libraries if lib.get("distribution")})
        extra = [name for name in owners if name != "torch"] or owners  # torch's own runtime is the one to keep
        findings.append(Finding(
            "two-openmp", "error" if mixed else "warning",
            f"{len(libraries)} OpenMP runtimes are loaded in this process: {names}. "
            + ("Different OpenMP runtimes in one process is the classic cause of 'OMP: Error #15' at import, "
               "hangs, and slow or wrong parallel math. " if mixed else
               "Each copy keeps its own thread pool, so the cores are oversubscribed. ") + DUPLICATE_OK_WHY,
            "Make every package use one OpenMP runtime: install the packages from one source (all pip wheels, or "
            "all conda packages from one channel), drop the package that brings the extra runtime if nothing "
            f"needs it ({', '.join(extra) or 'see the paths above'}), or import the one you keep first. Do "
            "not set KMP_DUPLICATE_LIB_OK."))
    if str(snap["details"]["variables"].get("KMP_DUPLICATE_LIB_OK", "")).upper() in ("TRUE", "1", "YES"):
        findings.append(Finding("kmp-duplicate-lib-ok", "warning", "KMP_DUPLICATE_LIB_OK is set. "
                                + DUPLICATE_OK_WHY,
                                "Unset KMP_DUPLICATE_LIB_OK and remove the second OpenMP runtime instead "
                                "(`torchwork env` lists each one with the package that ships it)."))
    return findings


def cuda_findings(snap: dict[str, Any]) -> list[Finding]:
    """A CUDA build with no usable GPU; a torch whose CUDA is newer than the driver supports."""
    t = snap["details"]["torch"]
    findings = []
    if build_family(t["build"]) == "cuda" and not t["cuda_available"]:
        visible = snap["details"]["variables"].get("CUDA_VISIBLE_DEVICES")
        hidden = visible is not None and visible.strip() in ("", "-1")
        findings.append(Finding(
            "cuda-build-no-gpu", "warning",
            f"torch {t['version']} is a CUDA {t['cuda_runtime']} build, but no GPU is usable"
            + (f" (CUDA_VISIBLE_DEVICES={visible!r} hides every GPU)" if hidden else
               f" (driver: {t['cuda_driver'] or 'none found'})") + ": everything runs on the CPU, with gigabytes "
            "of CUDA libraries loaded for nothing.",
            "On a CPU-only machine install the CPU build: pip install torch==<version> --index-url "
            "https://download.pytorch.org/whl/cpu. Otherwise install or repair the NVIDIA driver "
            "(nvidia-smi must list the GPU) or fix CUDA_VISIBLE_DEVICES."))
    runtime, driver = major_minor(t["cuda_runtime"]), major_minor(t["cuda_driver"])
    if runtime and driver and runtime > driver:
        major_newer = runtime[0] > driver[0]
        findings.append(Finding(
            "cuda-newer-than-driver", "error" if major_newer else "warning",
            f"torch was built with CUDA {t['cuda_runtime']}, but the driver supports CUDA {t['cuda_driver']} at most"
            + (": CUDA calls fail with 'driver version is insufficient'." if major_newer else
               ": it runs through minor-version compatibility, but kernels that need PTX JIT and newer "
               "features fail."),
            f"Update the NVIDIA driver to one for CUDA {t['cuda_runtime']} or later, or install a torch built for "
            f"CUDA {t['cuda_driver']} or older (e.g. --index-url https://download.pytorch.org/whl/cu"
            f"{t['cuda_driver'].replace('.', '')})."))
    return findings


def threads_findings(snap: dict[str, Any]) -> list[Finding]:
    """More compute threads than the CPUs this process may use."""
    cpus = snap["details"]["machine"]["usable_cpus"]
    threads = snap["details"]["torch"]["threads"]["intra_op"]
    findings = []
    if threads > cpus:
        findings.append(Finding(
            "threads-oversubscribed", "warning",
            f"torch uses {threads} intra-op threads but this process may run on {cpus} CPUs: the threads take "
            "turns on the cores, and each parallel op waits for the slowest.",
            f"torch.set_num_threads({cpus}) at start, or OMP_NUM_THREADS={cpus}; with several worker processes "
            "give each cpus / workers threads."))
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        value = snap["details"]["variables"].get(key, "")
        if value.isdigit() and int(value) > cpus:
            findings.append(Finding(
                "threads-oversubscribed", "warning", f"{key}={value} but this process may run on {cpus} CPUs.",
                f"Set {key}={cpus} (or fewer), or leave it unset."))
    return findings


RULES: tuple[Callable[[dict[str, Any]], list[Finding]], ...] = (openmp_findings, cuda_findings, threads_findings)


def environment_findings(snap: dict[str, Any]) -> list[Finding]:
    """Every rule's findings for a full snapshot, errors first."""
    return sort_findings(f for rule in RULES for f in rule(snap))
