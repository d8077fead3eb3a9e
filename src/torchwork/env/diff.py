"""``torchwork env diff A B``: what differs between two environments, most risky first.

Rank order: torch major / minor, CPU vs CUDA (or ROCm) build, CUDA major, Python minor, NumPy major, ONNX
Runtime, OpenMP runtimes, packages only on one side, then the rest (patch versions, other packages).
Each difference says why it matters and what to do.

Example:
    >>> from torchwork.env.diff import diff_profiles
    >>> from torchwork.env.sources import profile_from_lock
    >>> a = profile_from_lock("# python: 3.10.12\\ntorch==1.13.1+cu117\\n", "a")
    >>> b = profile_from_lock("# python: 3.8.18\\ntorch==2.0.0+cpu\\n", "b")
    >>> [d.what for d in diff_profiles(a, b)]
    ['torch major version', 'torch build', 'Python minor version']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torchwork.env.libraries import runtime_of
from torchwork.env.lock import torch_index
from torchwork.env.versions import build_family, major, major_minor

Profile = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Difference:
    """One difference: its rank (1 = most risky), what differs, both values, why it matters, what to do."""

    rank: int
    what: str
    a: str | None
    b: str | None
    why: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _torch(a: Profile, b: Profile) -> list[Difference]:
    va, vb = major_minor(a["torch"]), major_minor(b["torch"])
    if not va or not vb or va == vb:
        return []
    level = "major" if va[0] != vb[0] else "minor"
    return [Difference(1, f"torch {level} version", a["torch"], b["torch"],
                       "Kernels, numerical defaults, serialization and torch.export / ONNX export change between "
                       f"{level} releases: a model can load differently, compute different values, or not load.",
                       f"Pin the same torch on both machines (torch=={a['torch'].split('+')[0]} from "
                       "`torchwork env lock`), or retrain / re-export on the new one and compare with `torchwork "
                       "env check --artifact`.")]


def _build(a: Profile, b: Profile) -> list[Difference]:
    fa, fb = build_family(a["build"]), build_family(b["build"])
    if not fa or not fb or fa == fb:
        return []
    index = torch_index(a["build"])
    return [Difference(2, "torch build", a["build"], b["build"],
                       "CPU and GPU builds run different kernels and libraries (MKL / oneDNN against cuBLAS / cuDNN): "
                       "results differ in the last bits, some ops exist on one only, and a CUDA build on a machine "
                       "without a usable GPU loads gigabytes of libraries for nothing.",
                       "Install the build the model was made with"
                       + (f" (pip install torch==<version> --index-url {index})" if index else "")
                       + ", or prove the other one computes the same with `torchwork env check --artifact DIR`.")]


def _cuda(a: Profile, b: Profile) -> list[Difference]:
    if build_family(a["build"]) != "cuda" or build_family(b["build"]) != "cuda":
        return []
    ca, cb = major(a["build"].split()[-1]), major(b["build"].split()[-1])
    if ca is None or cb is None or ca == cb:
        return []
    return [Difference(3, "CUDA major version", a["build"], b["build"],
                       "A CUDA major version needs its own driver generation and brings other cuBLAS / cuDNN "
                       "kernels: one side may not start at all on the other's driver.",
                       "Install the torch built for the same CUDA major, and a driver that supports it "
                       "(`torchwork env` shows the driver's CUDA).")]


def _python(a: Profile, b: Profile) -> list[Difference]:
    va, vb = major_minor(a["python"]), major_minor(b["python"])
    if not va or not vb or va == vb:
        return []
    return [Difference(4, "Python minor version", a["python"], b["python"],
                       "Binary wheels are built per Python minor version, and which package versions exist differs: "
                       "the same pins may not install, and pickled or compiled files do not move across.",
                       f"Use Python {va[0]}.{va[1]} on both (a virtualenv or conda environment made from it).")]


def _package_major(rank: int, name: str, label: str, why: str) -> Callable[[Profile, Profile], list[Difference]]:
    def rule(a: Profile, b: Profile) -> list[Difference]:
        va, vb = a["packages"].get(name), b["packages"].get(name)
        if va and vb and major(va) != major(vb):
            return [Difference(rank, f"{label} major version", va, vb, why,
                               f"Pin {name}=={va} on both machines (from `torchwork env lock`).")]
        return []

    return rule


def _onnxruntime(a: Profile, b: Profile) -> list[Difference]:
    names = ("onnxruntime", "onnxruntime-gpu")
    va = next((a["packages"][n] for n in names if a["packages"].get(n)), None)
    vb = next((b["packages"][n] for n in names if b["packages"].get(n)), None)
    if not va or not vb or va == vb:
        return []
    return [Difference(6, "ONNX Runtime version", va, vb,
                       "ONNX Runtime picks kernels and graph optimisations by version (and major versions change "
                       "the opsets and quantized kernels): an exported ONNX model's outputs and speed can change.",
                       f"Pin onnxruntime=={va} where the artifact is served, or re-run `torchwork verify` there.")]


# Distributions that bring an OpenMP runtime of their own beside torch's (PyPI and conda names).
OPENMP_PACKAGES = {"intel-openmp": "libiomp5", "mkl": "libiomp5, through intel-openmp", "llvm-openmp": "libomp",
                   "openmp": "libomp", "libgomp": "libgomp", "_openmp_mutex": "an OpenMP selector"}


def _openmp(a: Profile, b: Profile) -> list[Difference]:
    why = ("A different OpenMP runtime, or two of them in one process, changes the thread pools and is the classic "
           "cause of 'OMP: Error #15' at import (or of hangs and oversubscribed cores).")
    fix = ("Run `torchwork env` on each machine: it names every loaded runtime with the package that ships it; "
           "keep one runtime (do not set KMP_DUPLICATE_LIB_OK).")
    oa, ob = a.get("openmp"), b.get("openmp")
    if oa is not None and ob is not None:
        # Compare runtimes, not file names: which vendored copies are mapped depends on what the process had
        # imported (scikit-learn's wheel brings its own libgomp-<hash>), a per-process fact, not a machine's.
        ra, rb = _runtimes(oa), _runtimes(ob)
        if ra == rb:
            return []
        return [Difference(7, "OpenMP runtimes", ", ".join(ra) or "none", ", ".join(rb) or "none", why, fix)]
    # Lock files say nothing of what is loaded, but they list the packages that ship a runtime.
    pa = {n: v for n, v in a["packages"].items() if n in OPENMP_PACKAGES}
    pb = {n: v for n, v in b["packages"].items() if n in OPENMP_PACKAGES}
    if pa == pb:
        return []

    def listed(packages: dict[str, str]) -> str:
        return ", ".join(f"{n}=={v} ({OPENMP_PACKAGES[n]})" for n, v in sorted(packages.items())) or "none"

    return [Difference(7, "OpenMP runtime packages", listed(pa), listed(pb), why, fix)]


def _runtimes(files: list[str]) -> list[str]:
    return sorted({(runtime_of(name) or ("", name))[1] for name in files})


def _one_side(a: Profile, b: Profile) -> list[Difference]:
    if not a["packages"] or not b["packages"]:
        return []
    found = []
    for side, mine, other in (("A", a, b), ("B", b, a)):
        only = sorted(set(mine["packages"]) - set(other["packages"]))
        if only:
            listed = ", ".join(f"{n}=={mine['packages'][n]}" for n in only)
            found.append(Difference(8, f"packages only in {side}", listed if side == "A" else None,
                                    listed if side == "B" else None,
                                    "Code that imports one of them works on one machine only; a package present "
                                    "on one side can also change behaviour by being imported (plugins, OpenMP).",
                                    f"Install them on the other side (pip install {' '.join(only[:4])}"
                                    f"{' ...' if len(only) > 4 else ''} -c {mine['label']}), or uninstall them "
                                    f"from {side} if nothing there imports them."))
    return found


_RISKY = {"torch", "onnxruntime", "onnxruntime-gpu"}  # ranked above the rest


def _rest(a: Profile, b: Profile) -> list[Difference]:
    found = []
    if a["torch"] and b["torch"] and a["torch"] != b["torch"] and major_minor(a["torch"]) == major_minor(b["torch"]):
        found.append(Difference(9, "torch patch version", a["torch"], b["torch"],
                                "Patch releases fix bugs without changing the API: rarely a cause, sometimes the cure.",
                                "Pin the same torch when you need bit-identical results."))
    if a["python"] and b["python"] and a["python"] != b["python"] and major_minor(a["python"]) == major_minor(
            b["python"]):
        found.append(Difference(9, "Python patch version", a["python"], b["python"], "Bug fixes only.",
                                "Nothing, unless a fix named in the Python changelog concerns you."))
    for name in sorted(set(a["packages"]) & set(b["packages"]) - _RISKY):
        va, vb = a["packages"][name], b["packages"][name]
        if va == vb or (name == "numpy" and major(va) != major(vb)):  # a NumPy major is ranked 5
            continue
        level = "major" if major(va) != major(vb) else "minor or patch"
        found.append(Difference(9, f"{name} version", va, vb, f"A {level} version difference of a dependency.",
                                f"Pin {name}=={va} on both sides when it matters."))
    return found


RULES: tuple[Callable[[Profile, Profile], list[Difference]], ...] = (
    _torch, _build, _cuda, _python,
    _package_major(5, "numpy", "NumPy", "NumPy 2 changed the ABI and the type-promotion rules (NEP 50): packages "
                   "built against NumPy 1 fail to import with NumPy 2, and mixed int / float results can change."),
    _onnxruntime, _openmp, _one_side, _rest)


def diff_profiles(a: Profile, b: Profile) -> list[Difference]:
    """Every difference between two profiles (see :mod:`torchwork.env.sources`), most risky first."""
    found = [d for rule in RULES for d in rule(a, b)]
    return sorted(found, key=lambda d: d.rank)  # stable: the order within a rank is the rules' order


def format_diff(a: Profile, b: Profile, differences: list[Difference]) -> str:
    head = f"A: {a['label']} ({a['kind']})\nB: {b['label']} ({b['kind']})"
    unknown = [f"{side}: {what} unknown ({p['kind']}{' without a # python: line' if what == 'python' else ''})"
               for side, p in (("A", a), ("B", b)) for what in ("python", "build") if not p[what]]
    lines = [head, *unknown]
    if not differences:
        lines.append("no differences")
        return "\n".join(lines)
    lines.append(f"{len(differences)} differences, most risky first:")
    for number, d in enumerate(differences, 1):
        if d.a is not None and d.b is not None:
            values = f"A {d.a}  ->  B {d.b}"
        else:
            values = f"A has {d.a}" if d.a is not None else f"B has {d.b}"
        lines.append(f"{number:>3}. [{d.what}] {values}")
        if d.rank < 9:
            lines.append(f"       why: {d.why}")
            lines.append(f"       do:  {d.fix}")
    return "\n".join(lines)
