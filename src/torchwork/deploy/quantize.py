"""INT8 dynamic quantization: ONNX Runtime's ``quantize_dynamic`` (exportable) and torch.ao's (legacy).

Operator types are chosen with care: by default only ``MatMul`` is quantized. The dynamo ONNX exporter
writes ``nn.Linear`` on 2-D inputs as ``Gemm``, which ONNX Runtime's dynamic quantizer does not handle,
so constant-weight ``Gemm`` nodes are first rewritten as ``MatMul`` + ``Add`` (same result) — otherwise a
"quantized" MLP would silently be the float model. Convolutions are left in float unless asked for:
``ConvInteger`` made a small CNN slower here (see benchmarks/deploy_quantize.py).

Example:
    >>> from torchwork.deploy.quantize import DEFAULT_OPS
    >>> DEFAULT_OPS
    ('MatMul',)
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchwork.deploy.calibration import float_calibration, quantized_activations
from torchwork.deploy.formats import quiet
from torchwork.deploy.fusion import fuse_attention, fused_matches
from torchwork.deploy.smoothing import apply_smoothing, check_alpha
from torchwork.errors import ConfigError, ExportError

DEFAULT_OPS = ("MatMul",)
SUPPORTED_OPS = ("MatMul", "Conv", "Gather", "Attention", "LSTM")
CONV_ADVICE = ("Quantizing Conv made a small CNN slower in ONNX Runtime on CPU here (about 10x lower throughput "
               "at batch 64 than the float ONNX graph: ConvInteger has no fast kernel for small convolutions), "
               "while MatMul-only INT8 was the fastest variant; keep quantize_ops=('MatMul',) unless "
               "benchmarks/deploy_quantize.py says otherwise for your model.")
TORCH_AO_WARNING = ("torch.ao.quantization.quantize_dynamic is deprecated in PyTorch, and its result cannot be "
                    "exported (neither torch.export nor ONNX handle its packed weights): it is measured for "
                    "comparison only. Deploy ONNX Runtime's INT8 variant (quantize='int8') instead.")


def gemm_to_matmul(model: Any) -> int:
    """Rewrite constant-weight ``Gemm`` (alpha = beta = 1, no transA) as ``MatMul`` + ``Add``, in place."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    new_nodes, rewritten = [], 0
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        convertible = (node.op_type == "Gemm" and len(node.input) >= 2 and node.input[1] in initializers
                       and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
                       and not attrs.get("transA", 0))
        if not convertible:
            new_nodes.append(node)
            continue
        weight = numpy_helper.to_array(initializers[node.input[1]])
        if attrs.get("transB", 0):
            weight = weight.T.copy()
        weight_name = f"{node.input[1]}__matmul_{rewritten}"
        graph.initializer.append(numpy_helper.from_array(weight, weight_name))
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}__matmul" if has_bias else node.output[0]
        new_nodes.append(helper.make_node("MatMul", [node.input[0], weight_name], [product],
                                          name=f"{node.name or 'gemm'}_matmul"))
        if has_bias:
            new_nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                              name=f"{node.name or 'gemm'}_bias"))
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(new_nodes)
        used = {name for node in graph.node for name in node.input}
        kept = [init for init in graph.initializer if init.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        onnx.checker.check_model(model)
    return rewritten


def quantize_onnx(source: Path, target: Path, op_types: tuple[str, ...] = DEFAULT_OPS,
                  per_channel: bool = False, smoothing: float | None = None,
                  calibration: Sequence[Mapping[str, Any]] = (), attention_mask: str | None = None,
                  check_feeds: Sequence[Mapping[str, Any]] = (), activations: str = "dynamic",
                  keep_float_outputs: bool = False, reduce_range: bool = True) -> dict[str, Any]:
    """Dynamic INT8 quantization of an ONNX file (weights INT8, activations quantized per call).

    ``per_channel``: one weight scale per output column instead of one per tensor. On the fine-tuned MiniLM
    it raised top-1 agreement with the float graph from 92.7% to 97.3% (600 test tweets).
    ``smoothing``: SmoothQuant's alpha (:mod:`torchwork.deploy.smoothing`), with scales measured on
    ``calibration`` (feeds: input name -> array); None: no smoothing.
    ``attention_mask``: the name of a transformer's 2-D padding-mask input: its attention is first fused for
    ONNX Runtime and quantized as ``QAttention`` (:mod:`torchwork.deploy.fusion`), kept only if the fused float
    graph matches the exported one on ``check_feeds``; otherwise the plain graph is quantized and the report
    says why.
    ``activations``: ``"dynamic"`` (ONNX Runtime's: one scale per tensor per call, so a row's rounding depends
    on what is batched with it) or ``"static"`` (scales fixed from ``calibration``: each row's answer depends
    on that row alone; :mod:`torchwork.deploy.static_scales`).
    ``reduce_range``: weights in 7 bits ([-64, 63]), as ONNX Runtime advises for CPUs without VNNI: there its
    u8 x s8 kernel adds pairs of products in 16 bits (``VPMADDUBSW``), which saturate with 8-bit weights and
    large activations. On an AVX2 AMD EPYC here, 8-bit weights made the INT8 graph of an MLP with outlier
    channels differ from ONNX's reference semantics by 0.18 on average (its error against float grew 6x);
    with 7 bits it computed them exactly. The artifact is served on CPUs the export cannot see, so 7 bits is
    the default; pass False for a fleet with VNNI only.
    One float pass over ``calibration`` serves smoothing and static scales (:mod:`torchwork.deploy.calibration`);
    ``keep_float_outputs``: make it (when there are calibration rows) even if neither is asked for, and
    return the float graph's first output on those rows as ``info["float_outputs"]`` (the fallback's margin
    needs it), not for the report.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    unknown = set(op_types) - set(SUPPORTED_OPS)
    if not op_types or unknown:
        raise ConfigError(f"quantize_ops={op_types!r}: choose from {SUPPORTED_OPS} (default {DEFAULT_OPS}).")
    check_activations(activations)
    if activations == "static" and not calibration:
        raise ConfigError("static INT8 activation scales need calibration inputs: pass calibration= (validation "
                          "rows, not the held-out samples), or activations='dynamic'.")
    if smoothing is not None:
        check_alpha(smoothing)
        if not calibration:
            raise ConfigError("INT8 smoothing needs calibration inputs: pass calibration= (real inputs, not the "
                              "held-out samples), or smoothing=None.")
    model = onnx.load(str(source))  # pulls the external weights in
    before = collections.Counter(node.op_type for node in model.graph.node)
    fusion = None
    if attention_mask is not None:
        model, fusion = _fused_or_plain(model, attention_mask, check_feeds)
        if fusion["applied"] and "Attention" not in op_types:
            op_types = (*op_types, "Attention")
    rewritten = gemm_to_matmul(model) if "MatMul" in op_types else 0
    measured = None
    if calibration and (smoothing is not None or activations == "static" or keep_float_outputs):
        measured = float_calibration(model, calibration, quantized_activations(model, op_types))
    divided = apply_smoothing(model, measured, smoothing) if measured is not None and smoothing is not None else {}
    log: list[str] = []
    try:
        with quiet(log):  # it logs "consider pre-processing" to the root logger on every call
            quantize_dynamic(model, str(target), op_types_to_quantize=list(op_types), weight_type=QuantType.QInt8,
                             per_channel=per_channel, reduce_range=reduce_range)
    except Exception as error:
        raise ExportError(f"onnxruntime.quantization.quantize_dynamic failed on {source.name}: "
                          f"{type(error).__name__}: {error}") from error
    quantized_model = onnx.load(str(target))
    frozen = 0
    if activations == "static":
        from torchwork.deploy.static_scales import freeze_activation_scales

        frozen = freeze_activation_scales(quantized_model, calibration,
                                          known=measured.ranges(divided) if measured is not None else None)
        onnx.save(quantized_model, str(target))
    after = collections.Counter(node.op_type for node in quantized_model.graph.node)
    quantized = _nodes_on_integer_weights(quantized_model)
    info = {"method": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8", "per_channel": per_channel,
            "reduce_range": reduce_range, "op_types": list(op_types), "gemm_rewritten_as_matmul": rewritten,
            "nodes_quantized": quantized,
            "smoothing": None if smoothing is None else {"alpha": smoothing, "matmuls": len(divided),
                                                         "calibration_batches": len(calibration)},
            "attention_fusion": fusion, "activations": activations, "static_scales": frozen,
            "ops_before": dict(sorted(before.items())), "ops_after": dict(sorted(after.items()))}
    if keep_float_outputs and measured is not None and measured.first_output is not None:
        info["float_outputs"] = measured.first_output
    if quantized == 0:
        target.unlink(missing_ok=True)
        raise ExportError(f"INT8 quantization with op types {list(op_types)} changed nothing in {source.name} "
                          f"(its operators: {dict(before)}): there is no constant-weight operator of those types. "
                          "Leave the model in float, or choose other op types.")
    return info


ACTIVATIONS = ("dynamic", "static")


def check_activations(activations: Any) -> str:
    """``activations`` when it is ``"dynamic"`` or ``"static"``, else a :class:`ConfigError`."""
    if activations not in ACTIVATIONS:
        raise ConfigError(f"quantize_activations={activations!r}: choose 'static' (scales fixed from calibration "
                          "rows: an answer depends on its own request alone) or 'dynamic' (ONNX Runtime's, per "
                          "batch).")
    return str(activations)


def _fused_or_plain(model: Any, attention_mask: str, check_feeds: Sequence[Mapping[str, Any]]) -> tuple[Any, dict]:
    """The attention-fused graph when it computes what ``model`` does on ``check_feeds``, else ``model``."""
    try:
        fused, counts = fuse_attention(model, attention_mask)
        problem = fused_matches(model, fused, check_feeds)
    except ExportError as error:
        problem, counts = str(error), {}
    if problem is not None:
        return model, {"applied": False, "reason": f"{problem}; the unfused graph was quantized"}
    return fused, {"applied": True, **counts, "checked_on": len(check_feeds)}


def _nodes_on_integer_weights(model: Any) -> int:
    """Nodes that compute on 8-bit weights: MatMulInteger, ConvInteger, a Gather from an INT8 table...
    (not the DequantizeLinear nodes, whose 8-bit constant input is only a zero point)."""
    from onnx import TensorProto

    eight_bit = {init.name for init in model.graph.initializer
                 if init.data_type in (TensorProto.INT8, TensorProto.UINT8)}
    return sum(1 for node in model.graph.node
               if node.op_type != "DequantizeLinear" and eight_bit.intersection(node.input))


def torch_dynamic_int8(model: Any) -> Any:
    """torch.ao dynamic INT8 quantization of every ``nn.Linear`` (a copy; deprecated; not exportable)."""
    import copy

    import torch

    warnings.warn(TORCH_AO_WARNING, FutureWarning, stacklevel=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model).cpu().eval(), {torch.nn.Linear},
                                                           dtype=torch.qint8)
    return quantized
