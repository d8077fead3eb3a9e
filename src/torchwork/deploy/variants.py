"""Each format exported into the artifact being built, loaded back from disk and checked against eager on the
probes; the INT8 variant made from the ONNX one. A format that fails is removed and refused with the reason.

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> from torchwork.deploy.parity import make_probes
    >>> from torchwork.deploy.plan import ExportPlan
    >>> model, x = torch.nn.Linear(4, 3).eval(), torch.randn(2, 4)
    >>> probes = make_probes((x,), [{0: "batch"}], [1, 3], ())
    >>> with torch.no_grad():
    ...     eager = [(model(*p.inputs),) for p in probes]
    >>> checked = export_variants(Path(tempfile.mkdtemp()), model, (x,), ExportPlan(formats=("pt2",)),
    ...                           ["input"], ["output"], [{0: "batch"}], probes, eager, [])
    >>> list(checked.variants), checked.refused
    (['pt2'], {})
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchwork.deploy import progress
from torchwork.deploy.advice import graph_advice, model_advice
from torchwork.deploy.aoti import export_pt2_aoti
from torchwork.deploy.fallback import measure_margin
from torchwork.deploy.formats import (
    TORCHSCRIPT_DEPRECATED,
    TRACE_EXPLANATION,
    export_onnx,
    export_pt2,
    export_torchscript,
)
from torchwork.deploy.manifest import VARIANT_FILES, Variant
from torchwork.deploy.parity import check_variant
from torchwork.deploy.plan import ExportPlan
from torchwork.deploy.quantize import CONV_ADVICE, quantize_onnx
from torchwork.deploy.runtime import open_runner
from torchwork.errors import ExportError


@dataclass
class Checked:
    """What the formats came to: the variants kept, the refused ones with the reason, parity.json, advice."""

    parity: dict[str, Any]
    variants: dict[str, Variant] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)


def export_variants(tmp: Path, module: Any, args: tuple[Any, ...], plan: ExportPlan, names: Sequence[str],
                    out_names: Sequence[str], dynamic: Sequence[dict[int, str]], probes: Sequence[Any],
                    eager_outputs: Sequence[Any], calibration: Sequence[dict[str, Any]]) -> Checked:
    """Every format of ``plan`` exported into ``tmp`` and checked on ``probes``; then INT8 when asked."""
    checked = Checked(parity={"probes": [p.label for p in probes], "atol": plan.atol, "rtol": plan.rtol,
                              "formats": {}},
                      advice=model_advice(module, plan.formats))
    for fmt in plan.formats:
        progress.stage(f"exporting and checking on {len(probes)} probes", variant=fmt)
        _export_one(checked, fmt, tmp, module, args, plan, names, out_names, dynamic, probes, eager_outputs)
    if plan.quantize:
        quantize_variant(tmp, checked.variants, checked.refused, checked.parity, probes, eager_outputs, plan, names,
                         calibration)
        if "Conv" in plan.quantize_ops:
            checked.advice.append(CONV_ADVICE)
    return checked


def _export_one(checked: Checked, fmt: str, tmp: Path, module: Any, args: tuple[Any, ...], plan: ExportPlan,
                names: Sequence[str], out_names: Sequence[str], dynamic: Sequence[dict[int, str]],
                probes: Sequence[Any], eager_outputs: Sequence[Any]) -> None:
    path = tmp / VARIANT_FILES[fmt]
    try:
        if fmt == "pt2":
            info = export_pt2(module, args, path, names, dynamic, plan.dim_bounds)
        elif fmt == "pt2-aoti":
            info = export_pt2_aoti(module, args, path, names, dynamic, plan.dim_bounds)
        elif fmt == "onnx":
            info = export_onnx(module, args, path, names, out_names, dynamic, plan.dim_bounds)
            checked.advice += graph_advice(info["graph"]["ops"])
        else:
            info = export_torchscript(module, args, path, plan.torchscript_method)
            checked.advice.append(TORCHSCRIPT_DEPRECATED)
        check = check_variant(open_runner(path, fmt, plan.threads, trusted=True), probes, eager_outputs,
                              atol=plan.atol, rtol=plan.rtol)
    except ExportError as error:
        checked.refused[fmt] = str(error)
        checked.parity["formats"][fmt] = {"ok": False, "export_error": str(error), "log": getattr(error, "log", [])}
        remove_variant(tmp, fmt)
        return
    problems = info["problems"] + check["problems"]
    if problems and fmt == "torchscript" and plan.torchscript_method == "trace":
        problems.append(TRACE_EXPLANATION)
    checked.parity["formats"][fmt] = {"ok": not problems, **check, "problems": problems,
                                      "export": {k: v for k, v in info.items() if k not in ("problems", "files")}}
    if problems:
        checked.refused[fmt] = " ".join(problems)
        remove_variant(tmp, fmt)
        return
    checked.variants[fmt] = Variant(path.name, fmt, [f for f in info["files"] if f != path.name],
                                    opset=info["graph"]["opset"] if fmt == "onnx" else None,
                                    method=plan.torchscript_method if fmt == "torchscript" else None)


def quantize_variant(tmp: Path, variants: dict[str, Variant], refused: dict[str, str], parity: dict[str, Any],
                     probes: Sequence[Any], eager_outputs: Sequence[Any], plan: ExportPlan, names: Sequence[str],
                     calibration: Sequence[dict[str, Any]] = ()) -> None:
    """The onnx-int8 variant from the ONNX one, checked on the probes (not to the float tolerance), with its
    float fallback's margin when the plan asks for one."""
    if "onnx" not in variants:
        refused["onnx-int8"] = "INT8 quantization starts from the ONNX variant, which was refused."
        return
    target = tmp / VARIANT_FILES["onnx-int8"]
    feeds = ([{name: tensor.numpy() for name, tensor in zip(names, probe.inputs)} for probe in probes]
             if plan.quantize_attention_mask is not None else [])  # what the fused graph is checked on
    progress.stage("quantizing (calibration rows)" if calibration else "quantizing", variant="onnx-int8",
                   total=len(calibration) or None, unit="batches")
    try:
        info = quantize_onnx(tmp / VARIANT_FILES["onnx"], target, tuple(plan.quantize_ops), plan.quantize_per_channel,
                             plan.quantize_smoothing, calibration, attention_mask=plan.quantize_attention_mask,
                             check_feeds=feeds, activations=plan.quantize_activations,
                             keep_float_outputs=plan.quantize_fallback_agreement is not None,
                             reduce_range=plan.quantize_reduce_range)
        check = check_variant(open_runner(target, "onnx", plan.threads), probes, eager_outputs, exact=False)
    except ExportError as error:
        refused["onnx-int8"] = str(error)
        parity["formats"]["onnx-int8"] = {"ok": False, "export_error": str(error)}
        target.unlink(missing_ok=True)
        return
    float_outputs = info.pop("float_outputs", None)
    parity["formats"]["onnx-int8"] = {**check, "quantization": info}
    if not check["ok"]:
        refused["onnx-int8"] = "; ".join(check["problems"])
        target.unlink(missing_ok=True)
        return
    fallback = None
    if plan.quantize_fallback_agreement is not None:
        passes = 1 if float_outputs is not None else 2  # the float side is in hand from the calibration pass
        progress.stage("the float fallback's margin on the calibration rows", variant="onnx-int8",
                       total=passes * len(calibration), unit="batches")
        fallback = {"variant": "onnx", **measure_margin(tmp / VARIANT_FILES["onnx"], target, calibration,
                                                        plan.quantize_fallback_agreement, plan.threads,
                                                        plan.quantize_fallback_margin, exact_outputs=float_outputs),
                    "agreement_asked": plan.quantize_fallback_agreement}
        if plan.quantize_attention_mask is not None:  # the unsure rows run again cut to their own longest
            fallback["padding_mask"] = plan.quantize_attention_mask
        parity["formats"]["onnx-int8"]["fallback"] = fallback
    variants["onnx-int8"] = Variant(target.name, "onnx", [], quantization={
        k: info[k] for k in ("method", "weight_type", "per_channel", "op_types", "nodes_quantized",
                             "gemm_rewritten_as_matmul", "smoothing", "attention_fusion", "activations",
                             "reduce_range")},
        fallback=fallback if fallback and fallback["margin"] is not None else None)


def remove_variant(tmp: Path, variant: str) -> None:
    """Delete a variant's file (and an ONNX model's external-data files) from the artifact being built."""
    name = VARIANT_FILES[variant]
    for path in tmp.iterdir():
        if path.name == name or (variant == "onnx" and path.name.startswith(name + ".")):
            path.unlink()
