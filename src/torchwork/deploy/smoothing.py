"""Activation smoothing before dynamic INT8 (SmoothQuant, Xiao et al. 2023), on an ONNX graph.

Dynamic INT8 quantizes a MatMul's activation with one scale per tensor per call. In a transformer a few
channels of the activations run 10-100x larger than the rest, so that one scale leaves the other channels
a handful of levels. Smoothing divides input channel ``j`` by ``s_j`` and multiplies row ``j`` of the
weight by ``s_j`` (the same product in exact arithmetic), with ``s_j = max|x_j| ** alpha / max|w_j| **
(1 - alpha)`` measured on calibration inputs: the outliers' range moves into the weights, which are
quantized with a scale per output column. The division is a ``Mul`` node before each MatMul (elementwise,
cheap beside the product).

Measured on the quickstart's fine-tuned MiniLM (3,600 test tweets, per-channel INT8 of every MatMul): top-1
agreement with the float graph 97.4% without smoothing; alpha 0.5 (the paper's default) lowered it, 0.8
raised it (see the README's deploy section for the figures).

Example:
    >>> import numpy as np, onnx
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> weight = numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")
    >>> graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], [weight])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    >>> smooth_matmuls(model, [{"x": np.array([[100.0, 1.0]], dtype=np.float32)}], alpha=0.8)
    1
    >>> [node.op_type for node in model.graph.node]
    ['Mul', 'MatMul']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError, ExportError

if TYPE_CHECKING:
    from torchwork.deploy.calibration import FloatCalibration

DEFAULT_ALPHA = 0.8  # measured on the fine-tuned MiniLM: 0.5 lowered agreement, 0.8 raised it
_SMALLEST = 1e-5  # a channel that never fires (or a zero weight row) keeps a finite scale


def check_alpha(alpha: float) -> float:
    """``alpha`` as a float in (0, 1], or a :class:`~torchwork.errors.ConfigError` saying why not."""
    value = float(alpha)
    if not 0.0 < value <= 1.0:  # also refuses NaN
        raise ConfigError(f"smoothing alpha={alpha!r} must be in (0, 1]: the share of each activation channel's "
                          f"range moved into the weights ({DEFAULT_ALPHA} measured best on MiniLM).")
    return value


def smooth_matmuls(model: Any, calibration: Iterable[Mapping[str, Any]], alpha: float = DEFAULT_ALPHA) -> int:
    """Smooth every MatMul with a constant weight of ``model`` (an ``onnx.ModelProto``, changed in place),
    with scales from the activations that ``calibration`` (feeds: input name -> array) produce; returns how
    many MatMuls were smoothed."""
    from torchwork.deploy.calibration import float_calibration, quantized_activations

    alpha = check_alpha(alpha)
    calibration = list(calibration)
    if not calibration:
        raise ConfigError("INT8 smoothing needs calibration inputs (at least one batch); none were given.")
    activations = quantized_activations(model, ("MatMul",))
    if not activations:
        return 0
    return len(apply_smoothing(model, float_calibration(model, calibration, activations), alpha))


def apply_smoothing(model: Any, measured: FloatCalibration, alpha: float = DEFAULT_ALPHA) -> dict[str, tuple[str, Any]]:
    """Smooth every MatMul with a constant 2-D weight of ``model`` (in place) with the channel ranges in
    ``measured``; returns, for each smoothed MatMul's new input, the activation it divides and the factor
    it multiplies that activation's channels by (``1 / s``), so that its range follows from ``measured``."""
    import numpy as np
    from onnx import helper, numpy_helper

    from torchwork.deploy.calibration import constant_matmuls

    alpha = check_alpha(alpha)
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    targets = {node.output[0] for node in constant_matmuls(model)}  # a graph's output names are unique
    added, nodes, divided = [], [], {}
    for node in graph.node:
        if node.op_type == "MatMul" and node.output[0] in targets:
            weight = numpy_helper.to_array(weights[node.input[1]]).astype(np.float32)
            x_max = measured.abs_max(node.input[0])
            if x_max.shape[0] != weight.shape[0]:
                raise ExportError(f"{node.name}: activations of {x_max.shape[0]} channels for a weight of "
                                  f"{weight.shape[0]} rows; this graph cannot be smoothed.")
            w_max = np.abs(weight).max(axis=1)
            scale = np.maximum(x_max, _SMALLEST) ** alpha / np.maximum(w_max, _SMALLEST) ** (1 - alpha)
            scale = np.clip(scale, 1e-4, 1e4).astype(np.float32)
            inverse = (1.0 / scale).astype(np.float32)
            prefix = f"{node.name or node.output[0]}_smoothed"
            added += [numpy_helper.from_array(weight * scale[:, None], f"{prefix}_weight"),
                      numpy_helper.from_array(inverse, f"{prefix}_inverse_scale")]
            nodes.append(helper.make_node("Mul", [node.input[0], f"{prefix}_inverse_scale"], [f"{prefix}_input"],
                                          name=f"{prefix}_mul"))
            divided[f"{prefix}_input"] = (node.input[0], inverse)
            node.input[0], node.input[1] = f"{prefix}_input", f"{prefix}_weight"
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]  # the unsmoothed weights go
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return divided
