"""One float pass over the calibration rows, for every INT8 step that reads them.

SmoothQuant's per-channel scales (:mod:`torchwork.deploy.smoothing`), the static activation scales
(:mod:`torchwork.deploy.static_scales`) and the float fallback's margin (:mod:`torchwork.deploy.fallback`)
all read the same calibration rows. Each used to run them through a graph of its own: the float graph, then
the dynamic INT8 graph, then the float graph again beside the final INT8 one. On the quickstart's MiniLM
(3,600 validation tweets) those passes took 99 s of a 370-s export stage. Here the float graph runs once,
with the activations that INT8 will quantize as extra outputs; what it keeps is small: each activation's
minimum and maximum per channel (its last axis), and the graph's first output row by row.

Static scales are then taken from the float graph's activations (after smoothing, each channel's range
times its smoothing factor, which is exact for a positive factor). Calibrating static INT8 on the float
model is the method ONNX Runtime's quantization documentation describes; the pass here is our own.

Example:
    >>> import numpy as np
    >>> from onnx import helper as h, numpy_helper, TensorProto as T
    >>> model = h.make_model(h.make_graph(
    ...     [h.make_node("Relu", ["x"], ["r"]), h.make_node("MatMul", ["r", "w"], ["y"])], "relu_then_matmul",
    ...     [h.make_tensor_value_info("x", T.FLOAT, [None, 2])], [h.make_tensor_value_info("y", T.FLOAT, None)],
    ...     [numpy_helper.from_array(np.ones((2, 1), dtype=np.float32), "w")]))
    >>> quantized_activations(model, ("MatMul",))
    ['r']
    >>> found = float_calibration(model, [{"x": np.array([[-3.0, 1.0], [2.0, 0.5]], dtype=np.float32)}], ["r"])
    >>> found.low["r"].tolist(), found.high["r"].tolist(), found.range_of("r", np.array([2.0, 1.0]))
    ([0.0, 0.5], [2.0, 1.0], (0.0, 4.0))
    >>> found.first_output.ravel().tolist()
    [1.0, 2.5]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torchwork.deploy import progress


@dataclasses.dataclass
class FloatCalibration:
    """What one float pass over the calibration feeds measured."""

    low: dict[str, Any]  # activation name -> per-channel minimum (numpy, float32)
    high: dict[str, Any]  # activation name -> per-channel maximum
    first_output: Any  # the graph's first output, every calibration row in feed order (numpy); None when
    # its shape follows the padding (one row per token), so that chunks padded apart cannot be joined
    batches: int

    def abs_max(self, name: str) -> Any:
        """The largest magnitude of each channel of ``name``."""
        import numpy as np

        return np.maximum(np.abs(self.low[name]), np.abs(self.high[name]))

    def range_of(self, name: str, factor: Any = None) -> tuple[float, float]:
        """The whole-tensor ``(min, max)`` of ``name``, or of ``name`` times a positive per-channel ``factor``."""
        low, high = self.low[name], self.high[name]
        if factor is not None:
            low, high = low * factor, high * factor
        return float(low.min()), float(high.max())

    def ranges(self, divided: Mapping[str, tuple[str, Any]] | None = None) -> dict[str, tuple[float, float]]:
        """The whole-tensor range of every measured activation, and of each tensor in ``divided`` (name ->
        the measured activation and the positive per-channel factor it is that activation times)."""
        found = {name: self.range_of(name) for name in self.low}
        found.update({name: self.range_of(source, factor) for name, (source, factor) in (divided or {}).items()})
        return found


def constant_matmuls(model: Any) -> list[Any]:
    """The ``MatMul`` nodes of ``model`` whose second input is a constant 2-D weight (an initializer)."""
    weights = {init.name: init for init in model.graph.initializer}
    return [node for node in model.graph.node
            if node.op_type == "MatMul" and node.input[1] in weights and len(weights[node.input[1]].dims) == 2]


def quantized_activations(model: Any, op_types: Sequence[str]) -> list[str]:
    """The tensors ONNX Runtime's dynamic quantizer quantizes per call for ``op_types``: input 0 of each
    ``MatMul`` on a constant 2-D weight and of each fused ``Attention``."""
    names = {node.input[0] for node in constant_matmuls(model)} if "MatMul" in op_types else set()
    if "Attention" in op_types:
        names.update(node.input[0] for node in model.graph.node if node.op_type == "Attention")
    return sorted(names)


def float_calibration(model: Any, feeds: Sequence[Mapping[str, Any]], activations: Sequence[str],
                      threads: int | None = None) -> FloatCalibration:
    """Run ``model`` (an ``onnx.ModelProto``, left unchanged) once over ``feeds``, keeping the per-channel
    range of each of ``activations`` and the first output."""
    import numpy as np
    import onnx

    from torchwork.deploy.runtime import onnx_session, run_session

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    first = probe.graph.output[0].name
    known = {output.name for output in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                              for name in activations if name not in known)
    session = onnx_session(probe.SerializeToString(), threads)
    wanted = [first, *activations]
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    outputs = []
    progress.stage("calibration: float activations on the calibration rows", variant="onnx-int8",
                   total=len(feeds) or None, unit="batches")
    for done, feed in enumerate(feeds, 1):
        values = run_session(session, wanted, feed)
        outputs.append(values[0])
        for name, value in zip(activations, values[1:]):
            flat = value.reshape(-1, value.shape[-1])
            lowest, highest = flat.min(axis=0), flat.max(axis=0)
            low[name] = lowest if name not in low else np.minimum(low[name], lowest)
            high[name] = highest if name not in high else np.maximum(high[name], highest)
        progress.rows(done)
    joinable = len({output.shape[1:] for output in outputs}) == 1
    return FloatCalibration(low, high, np.concatenate(outputs) if joinable else None, len(feeds))
