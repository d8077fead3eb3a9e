"""Activation scales fixed at export, so that an INT8 answer depends on its own request alone.

ONNX Runtime's dynamic quantization puts a ``DynamicQuantizeLinear`` before every integer product: it takes
one scale and zero point from the minimum and maximum of the *whole* tensor it is given. In a server that
tensor holds every request batched together (and their padding), so one request's rounding, and sometimes
its label, changed with what strangers sent at the same moment, or with the batch's padded length.

:func:`freeze_activation_scales` replaces each ``DynamicQuantizeLinear`` by a ``QuantizeLinear`` whose scale
and zero point are constants, computed here with the same formula ONNX Runtime uses at run time (the range
from ``min(0, x)`` to ``max(0, x)`` over 255 steps) but over the calibration rows (validation rows, given
to ``export(calibration=...)``): the ranges measured on the float graph by the calibration pass that
smoothing shares (:mod:`torchwork.deploy.calibration`), and only a tensor that pass did not see measured
here on the quantized graph. Every element is then rounded the same way whatever shares its batch; a
value outside the calibrated range saturates, as in any static INT8 scheme. What it costs on the fine-tuned
MiniLM is measured by ``benchmarks/deploy_static_int8.py``.

Example:
    >>> from torchwork.deploy.static_scales import range_scale
    >>> range_scale(-1.0, 3.0)
    (0.01568627450980392, 64)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from torchwork.deploy import progress
from torchwork.errors import ConfigError, ExportError


def range_scale(low: float, high: float) -> tuple[float, int]:
    """``(scale, uint8 zero point)`` of ONNX's ``DynamicQuantizeLinear`` for values in ``[low, high]``."""
    low, high = min(0.0, float(low)), max(0.0, float(high))
    scale = (high - low) / 255.0
    if scale == 0.0:
        return 1.0, 0
    zero_point = int(min(255, max(0, round(-low / scale))))
    return scale, zero_point


def activation_ranges(model: Any, feeds: Sequence[Mapping[str, Any]], threads: int | None = None,
                      skip: Collection[str] = ()) -> dict[str, tuple[float, float]]:
    """``{tensor name: (min, max)}`` over ``feeds`` of every tensor a ``DynamicQuantizeLinear`` quantizes
    (but those in ``skip``), measured on ``model`` itself."""
    import numpy as np
    import onnx

    from torchwork.deploy.runtime import onnx_session, run_session

    names = sorted({node.input[0] for node in model.graph.node
                    if node.op_type == "DynamicQuantizeLinear" and node.input[0] not in skip})
    if not names:
        return {}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names if n not in known)
    session = onnx_session(probe.SerializeToString(), threads)
    outputs = [o.name for o in session.get_outputs()]
    ranges: dict[str, tuple[float, float]] = {}
    progress.stage("static INT8 scales: activation ranges on the calibration rows", variant="onnx-int8",
                   total=len(feeds), unit="batches")
    for done, feed in enumerate(feeds, 1):
        values = dict(zip(outputs, run_session(session, None, feed)))
        progress.rows(done)
        for name in names:
            array = values[name]
            low, high = float(np.min(array)), float(np.max(array))
            seen = ranges.get(name)
            ranges[name] = (low, high) if seen is None else (min(seen[0], low), max(seen[1], high))
    return ranges


def freeze_activation_scales(model: Any, feeds: Sequence[Mapping[str, Any]], threads: int | None = None,
                             known: Mapping[str, tuple[float, float]] | None = None) -> int:
    """Replace every ``DynamicQuantizeLinear`` of ``model`` (in place) by a ``QuantizeLinear`` with the
    scale and zero point of its input's range over ``feeds``; returns how many were replaced. ``known``:
    ranges already measured over ``feeds`` (:mod:`torchwork.deploy.calibration`); only the others are
    measured here, on ``model``."""
    import numpy as np
    from onnx import helper, numpy_helper

    if not feeds:
        raise ConfigError("static INT8 activation scales need calibration inputs: pass calibration= (validation "
                          "rows, not the held-out samples).")
    known = dict(known or {})
    ranges = {**known, **activation_ranges(model, feeds, threads, skip=known)}
    nodes, replaced = [], 0
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        low, high = ranges[node.input[0]]
        if not (np.isfinite(low) and np.isfinite(high)):
            raise ExportError(f"the activation {node.input[0]!r} reached {low}..{high} on the calibration rows: "
                              "no INT8 scale can hold it; quantize with dynamic activation scales.")
        scale, zero_point = range_scale(low, high)
        y, y_scale, y_zero_point = node.output
        model.graph.initializer.extend([numpy_helper.from_array(np.array(scale, dtype=np.float32), y_scale),
                                        numpy_helper.from_array(np.array(zero_point, dtype=np.uint8), y_zero_point)])
        nodes.append(helper.make_node("QuantizeLinear", [node.input[0], y_scale, y_zero_point], [y],
                                      name=f"{node.name or y}_static"))
        replaced += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return replaced
