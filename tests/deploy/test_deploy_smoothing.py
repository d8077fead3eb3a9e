"""INT8 smoothing (SmoothQuant) on an ONNX graph: exact in float, less INT8 error where activations have
outlier channels, recorded in the manifest, and refused without calibration."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from deploy_helpers import FEATURES, OutlierMLP

from torchwork.deploy import export, read_manifest
from torchwork.deploy.quantize import gemm_to_matmul, quantize_onnx
from torchwork.deploy.smoothing import smooth_matmuls
from torchwork.errors import ConfigError


def _inputs(seed: int, rows: int = 256) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 8, FEATURES)).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("outlier") / "mlp"
    export(OutlierMLP().eval(), torch.from_numpy(_inputs(0, 4)), out, formats=("onnx",), input_names=("x",))
    return out / "model.onnx"


def _run(model_or_path, x: np.ndarray) -> np.ndarray:
    source = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_smoothing_leaves_the_float_graph_computing_the_same(exported):
    model = onnx.load(str(exported))
    gemm_to_matmul(model)
    smoothed = smooth_matmuls(model, [{"x": _inputs(1)}], alpha=0.8)
    ops = [node.op_type for node in model.graph.node]
    assert smoothed == 2 and ops.count("Mul") >= 2  # one division before each constant-weight MatMul
    x = _inputs(2)
    np.testing.assert_allclose(_run(model, x), _run(exported, x), rtol=1e-4, atol=1e-4)


def test_smoothing_lowers_the_int8_error_on_outlier_channels(exported, tmp_path):
    x = _inputs(3)
    reference = _run(exported, x)
    errors = {}
    for alpha in (None, 0.8):
        target = tmp_path / f"int8-{alpha}.onnx"
        info = quantize_onnx(exported, target, per_channel=True, smoothing=alpha,
                             calibration=[{"x": _inputs(4)}] if alpha else ())
        errors[alpha] = float(np.abs(_run(target, x) - reference).mean())
        assert (info["smoothing"] is None) == (alpha is None)
    assert info["smoothing"] == {"alpha": 0.8, "matmuls": 2, "calibration_batches": 1}
    # the outliers no longer set the one activation scale (0.56x with 7-bit weights on an AVX2 EPYC)
    assert errors[0.8] < 0.7 * errors[None], errors


def test_int8_computes_what_onnx_says_on_this_cpu(exported, tmp_path):
    """ONNX Runtime's INT8 graph against ONNX's reference semantics (numpy): with 7-bit weights (the default)
    they agree on any x86 CPU; with 8-bit ones, a CPU without VNNI saturates its 16-bit pair sums
    (VPMADDUBSW) and the outlier channels here made them differ by 0.18 on average (AMD EPYC, AVX2)."""
    from onnx.reference import ReferenceEvaluator

    target = tmp_path / "int8.onnx"
    info = quantize_onnx(exported, target, per_channel=True, smoothing=0.8, calibration=[{"x": _inputs(4)}])
    assert info["reduce_range"] is True
    x = _inputs(7, rows=32)
    reference = ReferenceEvaluator(str(target)).run(None, {"x": x})[0]
    np.testing.assert_allclose(_run(target, x), reference, atol=1e-4, rtol=0)


def test_reduce_range_must_be_a_bool(tmp_path):
    with pytest.raises(ConfigError, match="quantize_reduce_range='yes'"):
        export(OutlierMLP(), torch.from_numpy(_inputs(0, 4)), tmp_path / "a", formats=("onnx",), quantize="int8",
               quantize_reduce_range="yes")
    assert not (tmp_path / "a").exists()


def test_export_records_the_smoothing_and_calibrates_on_its_own_rows(tmp_path):
    out = tmp_path / "artifact"
    samples, calibration = torch.from_numpy(_inputs(5, 64)), torch.from_numpy(_inputs(6, 96))
    report = export(OutlierMLP().eval(), samples[:4], out, formats=("onnx",), input_names=("x",), quantize="int8",
                    quantize_per_channel=True, quantize_smoothing=0.8, calibration=calibration, strict=False)
    assert "onnx-int8" in report["variants"], report
    smoothing = read_manifest(out).variants["onnx-int8"].quantization["smoothing"]
    assert smoothing == {"alpha": 0.8, "matmuls": 2, "calibration_batches": 2}  # 96 rows in batches of 64


@pytest.mark.parametrize("alpha", [0.0, 1.5, math.nan, -0.2])
def test_a_smoothing_alpha_out_of_range_is_refused_before_any_work(tmp_path, alpha):
    with pytest.raises(ConfigError, match="alpha"):
        export(OutlierMLP(), torch.from_numpy(_inputs(0, 4)), tmp_path / "a", formats=("onnx",), quantize="int8",
               quantize_smoothing=alpha, calibration=torch.from_numpy(_inputs(1, 8)))
    assert not (tmp_path / "a").exists()


def test_smoothing_without_calibration_says_what_to_pass(tmp_path):
    with pytest.raises(ConfigError, match="calibration="):
        export(OutlierMLP(), torch.from_numpy(_inputs(0, 4)), tmp_path / "a", formats=("onnx",), quantize="int8",
               quantize_smoothing=0.8)
