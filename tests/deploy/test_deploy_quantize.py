"""INT8 dynamic quantization of a small CNN trained on real digits: accuracy on the real test split."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from deploy_helpers import digits, digits_cnn, digits_mlp, eager, images

from torchwork.cli import main as cli_main
from torchwork.deploy import export, load_artifact, read_manifest, verify
from torchwork.deploy.quantize import gemm_to_matmul
from torchwork.errors import ExportError


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    data = digits()
    out = tmp_path_factory.mktemp("cnn") / "cnn"
    report = export(digits_cnn(), images(data["x_train"][:8]), out, formats=("pt2", "onnx"), quantize="int8",
                    samples=images(data["x_test"]), targets=data["y_test"], verify_rounds=2, threads=1,
                    tolerance=0.02)
    return out, report


def _ops(path) -> collections.Counter:
    return collections.Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def test_int8_variant_quantizes_matmul_only_by_default(artifact):
    out, report = artifact
    assert report["ok"] and "onnx-int8" in report["variants"]
    quantization = read_manifest(out).variants["onnx-int8"].quantization
    assert quantization["op_types"] == ["MatMul"] and quantization["nodes_quantized"] >= 1
    ops = _ops(out / "model.int8.onnx")
    assert ops["MatMulInteger"] >= 1  # the linear head, exported as Gemm and rewritten as MatMul + Add
    assert ops["Conv"] == 2 and ops["ConvInteger"] == 0  # convolutions stay in float
    float_bytes = sum((out / name).stat().st_size for name in ("model.onnx", "model.onnx.data"))
    assert (out / "model.int8.onnx").stat().st_size < float_bytes


def test_accuracy_before_and_after_on_the_real_test_split(artifact):
    out, _ = artifact
    data = digits()
    x, y = images(data["x_test"]), data["y_test"]
    before = float((eager(digits_cnn(), x).argmax(1) == y).double().mean())
    after = float((load_artifact(out, "onnx-int8", threads=1)(x).argmax(1) == y).double().mean())
    assert before > 0.9
    assert abs(after - before) <= 0.02, (before, after)

    report = verify(out, model=digits_cnn(), rounds=2, threads=1, tolerance=0.02)
    rows = report["variants"]
    assert rows["eager"]["accuracy"] == pytest.approx(before)
    assert rows["onnx-int8"]["accuracy"] == pytest.approx(after)
    assert rows["onnx-int8"]["kind"] == "quantized" and rows["onnx-int8"]["ok"]
    assert rows["onnx-int8"]["bytes"] < rows["onnx"]["bytes"]
    for row in rows.values():
        assert row["latency_ratio"] > 0 and row["throughput_b64_per_s"] > 0
    assert report["deploy"] in ("pt2", "onnx", "onnx-int8")
    assert "within 0.02" in report["deploy_rule"]
    assert read_manifest(out).deploy in ("pt2", "onnx", "onnx-int8")


def test_a_quantized_variant_outside_the_tolerance_is_not_deployed(artifact, capsys):
    out, _ = artifact
    assert cli_main(["verify", str(out), "--tolerance", "-1", "--rounds", "1", "--threads", "1"]) == 1
    assert "PARITY FAILED" in capsys.readouterr().out
    report = verify(out, model=digits_cnn(), rounds=1, threads=1, tolerance=-1.0)  # nothing may drop
    assert report["variants"]["onnx-int8"]["ok"] is False and "drop" in report["variants"]["onnx-int8"]["problem"]
    assert report["ok"] is False and report["deploy"] != "onnx-int8"


def test_gemm_rewrite_keeps_the_outputs(tmp_path):
    out = tmp_path / "mlp"
    export(digits_mlp(), digits()["x_train"][:4], out, formats=("onnx",))
    model = onnx.load(str(out / "model.onnx"))
    assert collections.Counter(n.op_type for n in model.graph.node)["Gemm"] == 2
    assert gemm_to_matmul(model) == 2
    rewritten = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    x = digits()["x_test"][:64].numpy()
    np.testing.assert_allclose(rewritten.run(None, {"input": x})[0], original.run(None, {"input": x})[0],
                               atol=1e-5, rtol=1e-5)


def test_quantizing_convolutions_comes_with_advice(tmp_path, capsys):
    report = export(digits_cnn(), images(digits()["x_train"][:4]), tmp_path / "conv", formats=("onnx",),
                    quantize="int8", quantize_ops=("MatMul", "Conv"))
    assert _ops(tmp_path / "conv" / "model.int8.onnx")["ConvInteger"] == 2
    assert any("Quantizing Conv made a small CNN slower" in a for a in report["advice"])
    # No pt2 program and no Python model: the CLI has no eager reference, and says what to do.
    assert cli_main(["verify", str(tmp_path / "conv")]) == 2
    assert "no pt2 program to serve as the eager reference" in capsys.readouterr().err


def test_torch_ao_dynamic_quantization_is_measured_but_never_deployed(artifact):
    out, _ = artifact
    with pytest.warns(FutureWarning, match="cannot be exported"):
        report = verify(out, model=digits_cnn(), rounds=1, threads=1, torch_ao=True, tolerance=0.02)
    row = report["variants"]["torch-ao-int8"]
    assert row["kind"] == "comparison" and row["accuracy"] > 0.85
    assert report["deploy"] != "torch-ao-int8"


class _EmbeddingTable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(5_000, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(ids).sum(1)


def test_embedding_tables_quantize_as_int8_gathers(tmp_path):
    torch.manual_seed(0)
    model, ids = _EmbeddingTable().eval(), torch.randint(0, 5_000, (4, 6))
    with pytest.raises(ExportError, match="changed nothing"):  # MatMul only: nothing to quantize here
        export(model, ids, tmp_path / "matmul", formats=("onnx",), quantize="int8")
    assert not (tmp_path / "matmul").exists()
    export(model, ids, tmp_path / "gather", formats=("onnx",), quantize="int8", quantize_ops=("Gather",))
    quantization = read_manifest(tmp_path / "gather").variants["onnx-int8"].quantization
    assert quantization["nodes_quantized"] == 1
    graph = onnx.load(str(tmp_path / "gather" / "model.int8.onnx")).graph
    eight_bit = {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.UINT8 and list(i.dims) == [5_000, 8]}
    assert [n.op_type for n in graph.node if eight_bit.intersection(n.input)] == ["Gather"]
    quantized = load_artifact(tmp_path / "gather", "onnx-int8", threads=1)(ids)
    torch.testing.assert_close(torch.as_tensor(quantized), model(ids).detach(), atol=0.05, rtol=0.05)


def test_per_channel_weights_get_one_scale_per_output_column(tmp_path):
    from torchwork.deploy.quantize import quantize_onnx

    out = tmp_path / "mlp"
    export(digits_mlp(), digits()["x_train"][:8], out, formats=("onnx",))
    info = {}
    for per_channel in (False, True):
        target = tmp_path / f"int8-{per_channel}.onnx"
        info[per_channel] = quantize_onnx(out / "model.onnx", target, per_channel=per_channel)
        scales = [init for init in onnx.load(str(target)).graph.initializer if init.name.endswith("_scale")]
        widest = max(int(np.prod(init.dims)) if init.dims else 1 for init in scales)
        assert (widest > 1) == per_channel, [list(s.dims) for s in scales]
    assert info[True]["per_channel"] and not info[False]["per_channel"]
    assert info[True]["nodes_quantized"] == info[False]["nodes_quantized"] >= 1
