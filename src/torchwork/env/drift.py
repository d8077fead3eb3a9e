"""Warn when this machine differs riskily from the one that exported an artifact.

``torchwork serve`` and ``torchwork verify`` call :func:`warn_if_machine_differs` at start with the
artifact directory: it reads the snapshot the manifest recorded (``environment``; older artifacts:
``versions``) and names each difference in torch minor version, build kind (CPU / CUDA / ROCm) and ONNX
Runtime major version (when the artifact has an ONNX variant). It never fails the command: it warns.

Example:
    >>> from torchwork.env.drift import differences
    >>> here = {"torch": "2.13.0+cpu", "build": "cpu", "onnxruntime": "1.32.0"}
    >>> there = {"torch": "2.4.1+cu121", "build": "cuda 12.1", "onnxruntime": "1.18.0"}
    >>> [d.split(":")[0] for d in differences(there, here, onnx=True)]
    ['torch 2.4 exported it, this machine has 2.13', 'a cuda build exported it, this machine has a cpu build']
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from torchwork.env.versions import build_family, build_from_version, major, major_minor


def _onnxruntime(packages: dict[str, Any]) -> str | None:
    return _text(packages.get("onnxruntime")) or _text(packages.get("onnxruntime-gpu"))


def exporter_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """``{torch, build, onnxruntime}`` of the machine that wrote a manifest (None where it does not say)."""
    environment = manifest.get("environment")
    if isinstance(environment, dict) and environment:
        packages = environment.get("packages")
        return {"torch": _text(environment.get("torch")), "build": _text(environment.get("build")),
                "onnxruntime": _onnxruntime(packages if isinstance(packages, dict) else {})}
    versions = manifest.get("versions")
    if not isinstance(versions, dict):
        versions = {}
    return {"torch": _text(versions.get("torch")), "build": build_from_version(_text(versions.get("torch"))),
            "onnxruntime": _onnxruntime(versions)}


def _text(value: Any) -> str | None:
    """A recorded version as a string, None for anything else (a damaged manifest warns about nothing)."""
    return value if isinstance(value, str) else None


def this_machine() -> dict[str, Any]:
    """``{torch, build, onnxruntime}`` here, torch's read from its files (see
    :func:`~torchwork.env.versions.torch_version_facts`): serving an ONNX artifact loads no torch for it."""
    import importlib.metadata as metadata

    from torchwork.env.versions import build_of_torch, torch_version_facts

    ort = None
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            ort = metadata.version(name)
            break
        except metadata.PackageNotFoundError:
            continue
    torch = torch_version_facts()
    return {"torch": torch.__version__ if torch else None, "build": build_of_torch(torch) if torch else None,
            "onnxruntime": ort}


def differences(exporter: dict[str, Any], here: dict[str, Any], onnx: bool) -> list[str]:
    """The risky differences, each naming both sides, why it matters and what to do."""
    found = []
    there_torch, here_torch = major_minor(exporter.get("torch")), major_minor(here.get("torch"))
    if there_torch and here_torch and there_torch != here_torch:
        found.append(f"torch {'.'.join(map(str, there_torch))} exported it, this machine has "
                     f"{'.'.join(map(str, here_torch))}: kernels and export formats change between minor releases, "
                     f"so outputs can differ. Pin torch=={exporter['torch'].split('+')[0]} here, or re-export here.")
    there_build, here_build = build_family(exporter.get("build")), build_family(here.get("build"))
    if there_build and here_build and there_build != here_build:
        found.append(f"a {there_build} build exported it, this machine has a {here_build} build: CPU and GPU "
                     "kernels round differently and some ops exist on one only. Install the same build, or run "
                     "`torchwork env check --artifact DIR` here to prove the outputs agree.")
    there_ort, here_ort = major(exporter.get("onnxruntime")), major(here.get("onnxruntime"))
    if onnx and there_ort is not None and here_ort is not None and there_ort != here_ort:
        found.append(f"ONNX Runtime {exporter['onnxruntime']} exported it, this machine has {here['onnxruntime']}: "
                     "supported opsets and quantized kernels change between major versions. Pin onnxruntime=="
                     f"{exporter['onnxruntime']}.")
    return found


def warn_if_machine_differs(artifact: str | os.PathLike[str], stream: TextIO | None = None) -> list[str]:
    """Print a warning for each risky difference from the exporting machine; returns them.

    Silent (returns ``[]``) when the directory has no readable manifest: loading the artifact reports that.
    The manifest is read only as a regular file of at most a manifest's size (a FIFO would block, a link to
    ``/dev/zero`` would never end): anything else is left to that check too.
    """
    from torchwork.paths import MAX_MANIFEST_BYTES, read_regular

    path = Path(artifact) / "manifest.json"
    try:
        manifest = json.loads(read_regular(path, MAX_MANIFEST_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    if not isinstance(manifest, dict):
        return []
    variants = manifest.get("variants")
    if not isinstance(variants, dict):
        variants = {}
    found = differences(exporter_of(manifest), this_machine(), onnx=any(n.startswith("onnx") for n in variants))
    for text in found:
        print(f"torchwork: warning: this machine differs from the one that exported {artifact}: {text}",
              file=stream or sys.stderr)
    return found
