"""One float pass over the calibration rows (torchwork.deploy.calibration): the ranges it derives for the
smoothed activations are the ones the smoothed graph computes, and its float outputs stand in for the float
file's in the fallback's margin."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from deploy_helpers import FEATURES, OutlierMLP
from onnx import TensorProto, helper, numpy_helper

from torchwork.deploy import export
from torchwork.deploy.calibration import float_calibration, quantized_activations
from torchwork.deploy.fallback import measure_margin
from torchwork.deploy.quantize import gemm_to_matmul, quantize_onnx
from torchwork.deploy.runtime import onnx_session
from torchwork.deploy.smoothing import apply_smoothing


def _feeds(seed: int, batches: int = 3) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(64, FEATURES)).astype(np.float32)} for _ in range(batches)]


def _float_graph(tmp_path) -> onnx.ModelProto:
    export(OutlierMLP().eval(), torch.zeros(2, FEATURES), tmp_path / "mlp", formats=("onnx",), input_names=("x",))
    model = onnx.load(str(tmp_path / "mlp" / "model.onnx"))
    gemm_to_matmul(model)
    return model


def _ranges_computed_by(model: onnx.ModelProto, names: list[str], feeds) -> dict[str, tuple[float, float]]:
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in names)
    session = onnx_session(probe.SerializeToString(), threads=1)
    found: dict[str, tuple[float, float]] = {}
    for feed in feeds:
        for name, value in zip(names, session.run(names, feed)):
            low, high = float(value.min()), float(value.max())
            seen = found.get(name, (low, high))
            found[name] = (min(seen[0], low), max(seen[1], high))
    return found


def test_smoothed_activations_get_the_ranges_the_smoothed_graph_computes(tmp_path):
    model, feeds = _float_graph(tmp_path), _feeds(0)
    activations = quantized_activations(model, ("MatMul",))
    assert len(activations) == 2  # the LayerNorm's output and the GELU's
    measured = float_calibration(model, feeds, activations, threads=1)
    divided = apply_smoothing(model, measured, alpha=0.8)
    assert len(divided) == 2 and {source for source, _ in divided.values()} == set(activations)
    derived = measured.ranges(divided)
    computed = _ranges_computed_by(model, sorted(divided), feeds)  # the Mul nodes' outputs, run for real
    for name, (low, high) in computed.items():  # within float32 rounding (ONNX Runtime's Mul: 1 ulp here)
        assert derived[name] == pytest.approx((low, high), rel=1e-6, abs=1e-9), name
    # the unsmoothed activations' ranges are their own channels' extremes
    raw = _ranges_computed_by(model, activations, feeds)
    for name in activations:  # downstream of a smoothed MatMul, float rounding apart
        assert derived[name] == pytest.approx(raw[name], rel=1e-5, abs=1e-6), name


def test_the_float_pass_outputs_stand_in_for_the_float_file_in_the_margin(tmp_path):
    model, feeds = _float_graph(tmp_path), _feeds(1)
    float_path, int8_path = tmp_path / "float.onnx", tmp_path / "int8.onnx"
    onnx.save(model, str(float_path))
    info = quantize_onnx(float_path, int8_path, per_channel=True, smoothing=0.8, calibration=feeds,
                         activations="static", keep_float_outputs=True)
    float_outputs = info.pop("float_outputs")
    session = onnx_session(float_path, threads=1)
    np.testing.assert_allclose(float_outputs, np.concatenate([session.run(None, f)[0] for f in feeds]), atol=1e-5)
    both = measure_margin(float_path, int8_path, feeds, agreement=0.99, threads=1)
    given = measure_margin(float_path, int8_path, feeds, agreement=0.99, threads=1, exact_outputs=float_outputs)
    assert given == both
    assert info["static_scales"] == 2 and "float_outputs" not in quantize_onnx(
        float_path, tmp_path / "again.onnx", calibration=feeds, activations="static")


def test_outputs_that_follow_the_padding_are_not_joined():
    weight = numpy_helper.from_array(np.eye(3, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])],
                              "per_token",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, 3])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [{"x": np.ones((2, length, 3), dtype=np.float32)} for length in (4, 7)]
    measured = float_calibration(model, feeds, quantized_activations(model, ("MatMul",)), threads=1)
    assert measured.first_output is None and measured.range_of("h") == (1.0, 1.0) and measured.batches == 2


def test_runs_of_more_rows_than_a_servers_batch_shrink_the_arena_and_answer_the_same(tmp_path) -> None:
    """Parity and calibration runs (hundreds of rows) give ONNX Runtime's arena back when they end; a run of up
    to 64 rows (timed, or a server's batch) keeps the defaults. Shrinking changes no output."""
    from torchwork.deploy.runtime import SHRINK_ABOVE_ROWS, feed_rows, onnx_runner, run_options

    assert SHRINK_ABOVE_ROWS == 64 and run_options(64) is None and run_options(0) is None
    options = run_options(65)
    assert options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    assert feed_rows({"x": np.zeros((300, 4))}) == 300 and feed_rows({}) == 0 and feed_rows({"s": np.float32(1)}) == 0
    onnx.save(_float_graph(tmp_path), str(tmp_path / "plain.onnx"))
    session = onnx_session(tmp_path / "plain.onnx", threads=1)
    rows = np.random.default_rng(3).normal(size=(300, FEATURES)).astype(np.float32)
    expected = session.run(None, {"x": rows})[0]
    got = onnx_runner(tmp_path / "plain.onnx", threads=1)([torch.from_numpy(rows)])[0]
    np.testing.assert_array_equal(got.numpy(), expected)
