"""Replay an artifact's recorded example inputs on this machine and compare with the recorded outputs.

``torchwork export`` records, beside the example inputs (``examples.safetensors``), what eager and every
exported variant returned for them on the exporting machine (``example_outputs.safetensors``, keys
``<variant>.output_<i>``; data, never pickle). Replaying runs each variant here on the same inputs: a pass
is proof that this machine computes what the development machine computed. Float variants must agree
within the artifact's parity tolerance (``atol`` / ``rtol`` recorded with the outputs); a quantized
variant within ``atol`` 1e-3 / ``rtol`` 1e-2 at least, because integer kernels differ between CPU ISAs.
A variant that runs as code (TorchScript, a ``pt2-aoti`` native library) is replayed only when ``trust``
holds its word (:func:`torchwork.deploy.trust.may_load`); otherwise its result is a skip saying why.

Example:
    >>> from torchwork.deploy.replay import replay_artifact
    >>> [r.ok for r in replay_artifact("artifacts/digits")]    # doctest: +SKIP
    [True, True]
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from torchwork.arguments import name_list
from torchwork.errors import ExportError

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.env.known_answers import CheckResult

QUANTIZED_ATOL, QUANTIZED_RTOL = 1e-3, 1e-2


def replay_artifact(directory: str | os.PathLike[str], trust: Iterable[str] = ()) -> list[CheckResult]:
    """One result per variant of the artifact; a damaged artifact is one failed result saying why; a
    variant that runs as code and is not trusted (``trust=("torchscript",)``, ``("native",)``) is a skip.

    Raises :class:`~torchwork.errors.ExportError` when ``directory`` is not an artifact directory at all.
    """
    from torchwork.deploy.contents import load_examples
    from torchwork.deploy.manifest import MANIFEST, read_manifest, variant_format
    from torchwork.deploy.runtime import open_runner
    from torchwork.deploy.tensors import load_tensors
    from torchwork.deploy.trust import may_load, safe_member, why_not_loaded
    from torchwork.env.known_answers import CheckResult, compare_arrays  # numpy: not at import (--help)

    trust = name_list(trust, "trust") or ()  # "native" is one word, not six letters
    root = Path(directory)
    if not (root / MANIFEST).is_file():
        raise ExportError(f"{root} is not an artifact directory (no {MANIFEST}); pass a directory written by "
                          "`torchwork export`.")
    try:
        manifest = read_manifest(root)  # every file's SHA-256 first: a tampered file fails here
        entry = manifest.example_outputs
        if not isinstance(entry, dict):
            raise ExportError(f"artifact {root} records no example outputs (it was exported by an older "
                              "torchwork): re-export it to make it replayable.")
        recorded_atol = _tolerance(root, entry, "atol", 1e-4)
        recorded_rtol = _tolerance(root, entry, "rtol", 1e-3)
        inputs = load_examples(root, manifest)
        recorded = load_tensors(safe_member(root, entry.get("file"), "the example outputs entry"))
    except ExportError as damaged:
        return [CheckResult(f"artifact {root}", False, None, None, None, str(damaged))]
    results, trust = [], tuple(trust)
    for name, variant in manifest.variants.items():
        label = f"artifact {name} on its recorded inputs"
        if not may_load(variant_format(name), trust):
            reason = f"not run: {why_not_loaded(variant_format(name))}"
            results.append(CheckResult(label, True, None, None, None, reason, skipped=True))
            continue
        quantized = variant.quantization is not None
        atol = max(recorded_atol, QUANTIZED_ATOL if quantized else 0.0)
        rtol = max(recorded_rtol, QUANTIZED_RTOL if quantized else 0.0)
        started = time.perf_counter()
        try:
            path = safe_member(root, variant.file, f"variant {name!r}")
            run = open_runner(path, variant_format(name), trusted=True)  # data, or trusted just above
            outputs = run(inputs)
            expected = [recorded[key] for key in sorted(k for k in recorded if k.startswith(f"{name}.output_"))]
            if not expected:
                raise ExportError(f"no recorded outputs for variant {name!r}")
            if len(outputs) != len(expected):
                raise ExportError(f"{len(outputs)} outputs, {len(expected)} recorded")
            ok, error, detail = True, 0.0, ""
            for index, (got, want) in enumerate(zip(outputs, expected)):
                one_ok, one_error, one_detail = compare_arrays(got.double().numpy(), want.double().numpy(), atol, rtol)
                error = max(error, one_error)
                if not one_ok and ok:
                    ok, detail = False, f"output {index} differs from the recording {one_detail}"
        except Exception as failure:  # a variant that no longer loads or runs here fails the check
            ok, error, detail = False, None, f"{type(failure).__name__}: {failure}"
        results.append(CheckResult(label, ok, error, atol, rtol, detail,
                                   seconds=round(time.perf_counter() - started, 4)))
    return results


def _tolerance(root: Path, entry: dict[str, object], key: str, default: float) -> float:
    """A recorded tolerance: a finite number from 0 to 1 (a NaN or an infinite one would pass anything)."""
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ExportError(f"artifact {root}: the example outputs' {key} is {str(value)[:40]}, not a number from "
                          "0 to 1; the manifest is damaged: re-export the model.")
    return float(value)
