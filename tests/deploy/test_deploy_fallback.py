"""INT8 with a float fallback (torchwork.deploy.fallback): the margin chosen on calibration rows, recorded on
the variant, applied wherever the artifact runs, and refused where it cannot work; model files forged to
another width or inputs than the artifact's (issue 49, item 9) refused when it loads, naming the file (copies
of the module's artifact with one file replaced and the manifest's file table resealed, as an attacker
would)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from deploy_helpers import FEATURES, OutlierMLP

from torchwork.deploy import export, load_artifact, read_manifest
from torchwork.deploy.fallback import choose_margin, fallback_runner, margins
from torchwork.deploy.trust import sha256_of
from torchwork.errors import ConfigError, ExportError


def _rows(seed: int, count: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(count, FEATURES)).astype(np.float32))


def test_choose_margin_covers_the_flips_it_must_and_no_more():
    rng = np.random.default_rng(0)
    exact = rng.normal(size=(1000, 3))
    quantized = exact + rng.normal(scale=0.3, size=exact.shape)
    flips = exact.argmax(-1) != quantized.argmax(-1)
    assert 0.05 < flips.mean() < 0.5
    chosen = choose_margin(exact, quantized, agreement=0.99)
    assert chosen["agreement_without"] == pytest.approx(1 - flips.mean())
    assert chosen["agreement_with"] >= 0.99
    rerun = margins(quantized) <= chosen["margin"]
    assert 1 - (flips & ~rerun).mean() == pytest.approx(chosen["agreement_with"])
    assert chosen["rows_rerun"] == pytest.approx(rerun.mean())
    smaller = margins(quantized) <= np.nextafter(chosen["margin"], 0)  # any smaller margin misses the goal
    assert 1 - (flips & ~smaller).mean() < 0.99
    assert choose_margin(exact, exact, agreement=1.0)["margin"] is None
    with pytest.raises(ConfigError, match=r"must be in \(0, 1\]"):
        choose_margin(exact, quantized, agreement=float("nan"))


def test_fallback_runner_answers_again_only_the_unsure_rows():
    logits = torch.tensor([[3.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.0, 5.0]])
    calls = []

    def exact(inputs):
        calls.append(inputs[0].tolist())
        return [torch.full((len(inputs[0]), 3), 7.0)]

    run = fallback_runner(lambda inputs: [logits.clone()], exact, margin=0.2)
    out = run([torch.tensor([10, 11, 12])])[0]
    assert calls == [[11]]  # only row 1 (margin about 0.03) went to the exact runner
    assert out[1].tolist() == [7.0, 7.0, 7.0] and torch.equal(out[[0, 2]], logits[[0, 2]])


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("fallback") / "mlp"
    export(OutlierMLP().eval(), _rows(0, 4), out, formats=("onnx",), input_names=("x",), labels=["a", "b", "c"],
           softmax=True, quantize="int8", quantize_fallback_agreement=1.0, calibration=_rows(1, 512))
    return out


def test_export_records_the_margin_and_every_runner_applies_it(artifact):
    manifest = read_manifest(artifact)
    fallback = manifest.variants["onnx-int8"].fallback
    assert fallback["variant"] == "onnx" and 0 < fallback["margin"] <= 1
    assert fallback["agreement_without"] < 1.0 and fallback["agreement_with"] == 1.0
    assert fallback["calibration_rows"] == 512 and 0 < fallback["rows_rerun"] < 0.5
    x = _rows(1, 512)  # the calibration rows, in the export's batches of 64: float's answer on every one
    int8, exact = load_artifact(artifact, "onnx-int8"), load_artifact(artifact, "onnx")
    answers = [int8(x[i:i + 64]).argmax(-1) for i in range(0, 512, 64)]
    assert torch.equal(torch.cat(answers), exact(x).argmax(-1))
    rows = load_artifact(artifact, "onnx-int8").rows((x[:64],))  # what torchwork serve runs
    assert np.array_equal(rows.argmax(-1), exact(x[:64]).argmax(-1).numpy())


def test_a_damaged_fallback_is_refused_when_read(artifact, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(artifact, copy)
    data = json.loads((copy / "manifest.json").read_text())
    data["variants"]["onnx-int8"]["fallback"]["margin"] = 2.5
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="fallback margin 2.5 must be a probability margin"):
        read_manifest(copy)
    data["variants"]["onnx-int8"]["fallback"].update(margin=0.1, variant="pt2")
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="falls back to 'pt2', which the artifact does not hold"):
        load_artifact(copy, "onnx-int8")
    data["variants"]["onnx-int8"]["fallback"].update(variant="onnx", padding_mask=7)
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match="fallback padding mask is 7, not a str"):
        read_manifest(copy)
    data["variants"]["onnx-int8"]["fallback"]["padding_mask"] = "attention_mask"
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ExportError, match=r"padding mask 'attention_mask' is not a 2-D input of the model \(its "
                                          r"inputs: \['x'\]\)"):
        load_artifact(copy, "onnx-int8")


@pytest.mark.parametrize("settings, message", [
    ({"quantize": None}, "it needs quantize='int8'"),
    ({"calibration": None}, "it needs calibration="),
    ({"labels": None, "softmax": False}, "it is for classifiers"),
    ({"quantize_fallback_agreement": 1.5}, r"must be in \(0, 1\]"),
])
def test_the_fallback_settings_are_checked_before_any_work(tmp_path, settings, message):
    kwargs = {"formats": ("onnx",), "input_names": ("x",), "labels": ["a", "b", "c"], "softmax": True,
              "quantize": "int8", "quantize_fallback_agreement": 0.99, "calibration": _rows(1, 64), **settings}
    with pytest.raises(ConfigError, match=message):
        export(OutlierMLP().eval(), _rows(0, 4), tmp_path / "a", **kwargs)
    assert not (tmp_path / "a").exists()


# ----------------------------------------------------------------------------------------- forged files
def _linear_onnx(path: Path, features: int, width: int, inputs: int = 1) -> None:
    """An ONNX graph x @ W (features -> width), with ``inputs`` graph inputs (the others unused)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((features, width), dtype=np.float32), "W")
    declared = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["batch", features]) for i in range(inputs)]
    graph = helper.make_graph([helper.make_node("MatMul", ["x0", "W"], ["y"])], "forged", declared,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def _reseal(artifact: Path, *names: str) -> None:
    """The manifest's file table made to agree with the forged files (bytes and SHA-256)."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    for name in names:
        manifest["files"][name].update(bytes=(artifact / name).stat().st_size, sha256=sha256_of(artifact / name))
    (artifact / "manifest.json").write_text(json.dumps(manifest))


def _forged(source: Path, tmp_path: Path, variant: str, width: int, inputs: int = 1) -> Path:
    copy = tmp_path / "forged"
    shutil.copytree(source, copy)
    file = json.loads((copy / "manifest.json").read_text())["variants"][variant]["file"]
    _linear_onnx(copy / file, FEATURES, width, inputs)
    _reseal(copy, file)
    return copy


def test_a_float_fallback_of_another_width_is_refused_at_load(artifact, tmp_path) -> None:
    forged = _forged(artifact, tmp_path, "onnx", width=5)
    with pytest.raises(ExportError, match=r"variant 'onnx' \(model.onnx\) answers 5 values per item for the 3 "
                                          "labels the manifest names"):
        load_artifact(forged, "onnx-int8")


def test_an_int8_graph_of_another_width_or_inputs_is_refused_at_load(artifact, tmp_path) -> None:
    forged = _forged(artifact, tmp_path, "onnx-int8", width=4)
    with pytest.raises(ExportError, match=r"variant 'onnx-int8' \(model.int8.onnx\) answers 4 values per item"):
        load_artifact(forged, "onnx-int8")
    shutil.rmtree(forged)
    forged = _forged(artifact, tmp_path, "onnx-int8", width=3, inputs=2)
    with pytest.raises(ExportError, match=r"variant 'onnx-int8' \(model.int8.onnx\) fails on the artifact's "
                                          r"example inputs \(ExportError: the ONNX graph takes 2 inputs"):
        load_artifact(forged, "onnx-int8")


def test_examples_without_their_inputs_are_one_failed_check(artifact, tmp_path) -> None:
    from torchwork.deploy.replay import replay_artifact
    from torchwork.deploy.tensors import save_tensors

    copy = tmp_path / "copy"
    shutil.copytree(artifact, copy)
    save_tensors(copy / "examples.safetensors", {"other": torch.zeros(2, FEATURES)})
    _reseal(copy, "examples.safetensors")
    (result,) = replay_artifact(copy)
    assert not result.ok and "examples.safetensors lacks input_0 (the model takes 1 input(s); the file holds " \
                              "other): it is damaged" in result.detail
    with pytest.raises(ExportError, match="examples.safetensors lacks input_0"):
        load_artifact(copy)
