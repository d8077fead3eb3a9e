"""The ``pt2-aoti`` format: the torch.export program compiled ahead of time by AOTInductor.

``torch._inductor.aoti_compile_and_package`` turns the exported program into a ``.pt2`` package holding a
native shared library (C++ kernels compiled by the system's g++), which Python loads with
``torch._inductor.aoti_load_package`` and C++ with ``torch::inductor::AOTIModelPackageLoader`` (see
:mod:`torchwork.deploy.cpp_runner`). No Python interpreter is needed to run it.

A native library runs as code the moment it is loaded, unlike every other file of an artifact. The file
table's SHA-256 proves that the files are the ones exported, not who exported them, so an artifact's
``pt2-aoti`` variant is loaded only by its exporter, when it is named explicitly, or with
``trust=("native",)`` (:data:`~torchwork.deploy.trust.NATIVE_TRUST`); the rule, shared with TorchScript, is
:func:`torchwork.deploy.trust.may_load`.

Example:
    >>> from torchwork.deploy.trust import trust_needed
    >>> trust_needed(FORMAT)
    'native'
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.deploy.formats import Bounds, dims_problems, export_failure, kept_dims, quiet, torch_dims
from torchwork.deploy.trust import NATIVE_TRUST  # noqa: F401 (its old import path)
from torchwork.errors import ExportError

FORMAT = "pt2-aoti"


def export_pt2_aoti(model: Any, args: tuple[Any, ...], path: Path, names: Sequence[str],
                    dynamic: Sequence[dict[int, str]], bounds: Bounds | None = None) -> dict[str, Any]:
    """torch.export the model, compile the program with AOTInductor for this CPU and write the package."""
    import torch

    log: list[str] = []
    started = time.perf_counter()
    try:
        with quiet(log):
            program = torch.export.export(model, args, dynamic_shapes=torch_dims(dynamic, bounds))
            exported = time.perf_counter()
            torch._inductor.aoti_compile_and_package(program, package_path=str(path))
    except Exception as error:
        raise export_failure("pt2-aoti (AOTInductor)", error, log) from error
    kept = kept_dims(program, names, dynamic)
    return {"files": [path.name], "dims": kept, "problems": dims_problems(kept, "torch.export", bounds),
            "compile_seconds": round(time.perf_counter() - exported, 2),
            "export_seconds": round(exported - started, 2), "log": log[-20:]}


def aoti_runner(path: Path) -> Any:
    """Model inputs -> the flat list of outputs of an AOTInductor package (its native library loaded)."""
    import torch

    from torchwork.deploy.tensors import flatten_outputs

    try:
        compiled = torch._inductor.aoti_load_package(str(path))
    except Exception as error:
        raise ExportError(f"{path}: the AOTInductor package did not load ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}). It was compiled by another torch "
                          "version or for another CPU: export it again on this machine.") from error

    def run(inputs: Sequence[Any]) -> list[Any]:
        with torch.no_grad():
            return flatten_outputs(compiled(*inputs))

    return run

