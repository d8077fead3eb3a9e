"""An MLP trained on real digits: the artifact, its formats, verify, load_artifact, the CLI, damage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from deploy_helpers import digits, digits_mlp, eager

from torchwork.cli import main as cli_main
from torchwork.deploy import export, format_report, load_artifact, load_weights, read_manifest, verify
from torchwork.errors import ConfigError, ExportError

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    model, data = digits_mlp(), digits()
    out = tmp_path_factory.mktemp("digits") / "mlp"
    with pytest.warns(FutureWarning, match="TorchScript is deprecated"):
        report = export(model, data["x_train"][:8], out, formats=("pt2", "onnx", "torchscript"),
                        samples=data["x_test"], targets=data["y_test"], labels=[str(i) for i in range(10)],
                        softmax=True, verify_rounds=2, threads=1)
    return out, report


def test_artifact_files_and_manifest_schema(artifact):
    out, report = artifact
    assert report["ok"] and report["refused"] == {}
    assert report["variants"] == ["pt2", "onnx", "torchscript"]
    names = {p.name for p in out.iterdir()}
    assert {"manifest.json", "model.pt2", "model.onnx", "model.onnx.data", "model.torchscript.pt",
            "weights.safetensors", "examples.safetensors", "samples.safetensors", "parity.json",
            "verify.json"} <= names
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "no temporary directory left behind"
    manifest = read_manifest(out).to_json()  # the typed manifest as written on disk
    assert manifest["inputs"] == [{"name": "input", "dtype": "float32", "shape": ["batch", 64]}]
    assert manifest["outputs"] == [{"name": "output", "dtype": "float32", "shape": ["batch", 10]}]
    assert {"torch", "onnx", "onnxruntime", "torchwork", "python"} <= set(manifest["versions"])
    assert manifest["variants"]["onnx"]["extra_files"] == ["model.onnx.data"]
    assert manifest["postprocess"] == {"softmax": True, "labels": [str(i) for i in range(10)]}
    assert any("TorchScript is deprecated" in a for a in manifest["advice"])
    parity = json.loads((out / "parity.json").read_text())
    assert {"batch 1", "batch 64"} <= set(parity["probes"])
    for fmt in ("pt2", "onnx", "torchscript"):
        assert parity["formats"][fmt]["ok"], parity["formats"][fmt]


def test_export_leaves_the_models_modes_alone(artifact):
    model = digits_mlp()
    assert model.training and all(m.training for m in model.modules())


def test_weights_are_the_eager_state_dict(artifact):
    out, _ = artifact
    weights = load_weights(out)
    state = digits_mlp().state_dict()
    assert weights.keys() == state.keys()
    assert all(torch.equal(weights[k], state[k]) for k in state)


def test_onnx_runs_batch_1_and_64_in_onnxruntime(artifact):
    out, _ = artifact
    x = digits()["x_test"]
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 64]
    for rows in (x[:1], x[:64]):
        got = session.run(None, {"input": rows.numpy()})[0]
        want = eager(digits_mlp(), rows).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("variant", ["onnx", "pt2", "torchscript"])
def test_load_artifact_matches_eager_with_postprocessing(artifact, variant):
    out, _ = artifact
    x = digits()["x_test"][:37]
    predict = load_artifact(out, variant, threads=1)
    probabilities = predict(x)
    torch.testing.assert_close(probabilities, torch.softmax(eager(digits_mlp(), x), dim=1), atol=1e-5, rtol=1e-4)
    labels = predict.classify(x[:3])
    assert [row["label"] for row in labels] == [str(int(i)) for i in probabilities[:3].argmax(1)]


def test_load_artifact_checks_inputs_against_the_schema(artifact):
    out, _ = artifact
    predict = load_artifact(out)
    with pytest.raises(ConfigError, match=r"shape \['batch', 64\]"):
        predict(torch.zeros(2, 65))
    assert predict(np.zeros((2, 64))).shape == (2, 10)  # float64 numpy is converted within the float kind


def test_verify_against_the_eager_model_on_the_test_split(artifact):
    out, _ = artifact
    report = verify(out, model=digits_mlp(), rounds=2, threads=1, trust=("torchscript",))  # its own export
    assert report["ok"] and report["reference"].startswith("eager model") and report["not_loaded"] == {}
    assert report["inputs"] == {"source": "held-out samples bundled at export", "count": 360,
                                "preprocessed": False, "targets": True, "parity_padding": "one batch",
                                "timing_inputs": "the held-out rows as given"}
    reference = report["variants"]["eager"]
    assert reference["accuracy"] > 0.9
    for name in ("pt2", "onnx", "torchscript"):
        row = report["variants"][name]
        assert row["ok"] and row["kind"] == "exact"
        assert row["top1_agreement"] == 1.0 and row["accuracy"] == reference["accuracy"]
        assert row["max_abs"] < 1e-4 and row["bytes"] > 0
        assert row["latency_ratio"] > 0 and row["throughput_ratio"] > 0
    assert report["deploy"] in ("pt2", "onnx", "torchscript")
    table = format_report(report)
    assert "throughput b64" in table and f"{report['deploy']} *" in table


def test_verify_cli_uses_the_pt2_program_as_reference_and_prints_json(artifact):
    out, _ = artifact
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "verify", str(out), "--json", "--rounds", "2",
                           "--threads", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["variants"]["pt2"]["kind"] == "reference"
    assert report["variants"]["onnx"]["top1_agreement"] == 1.0


def test_existing_directory_is_not_overwritten_unless_asked(artifact, tmp_path):
    out, _ = artifact
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    model, x = digits_mlp(), digits()["x_train"][:4]
    with pytest.raises(ConfigError, match="already exists"):
        export(model, x, copy, formats=("pt2",))
    report = export(model, x, copy, formats=("pt2",), overwrite=True)
    assert report["ok"] and read_manifest(copy).variants.keys() == {"pt2"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]


# ----------------------------------------------------------------------------------------- damage
@pytest.fixture()
def damaged(artifact, tmp_path):
    copy = tmp_path / "artifact"
    shutil.copytree(artifact[0], copy)
    return copy


def _rewrite_manifest(directory: Path, change) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    change(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_missing_manifest(damaged):
    (damaged / "manifest.json").unlink()
    with pytest.raises(ExportError, match="manifest.json is missing"):
        load_artifact(damaged)


def test_corrupt_manifest(damaged):
    (damaged / "manifest.json").write_text('{"torchwork_artifact": 1, "inputs": [')
    with pytest.raises(ExportError, match="not valid JSON"):
        verify(damaged)


def test_truncated_external_data(damaged):
    data = damaged / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ExportError, match=r"damaged: model.onnx.data: 100 bytes.*truncated"):
        load_artifact(damaged)


def test_changed_bytes_are_caught_by_the_checksum(damaged):
    weights = damaged / "model.onnx.data"
    raw = bytearray(weights.read_bytes())
    raw[10] ^= 0xFF
    weights.write_bytes(bytes(raw))
    with pytest.raises(ExportError, match="SHA-256"):
        load_artifact(damaged, "onnx")


def test_missing_model_file_via_cli(damaged, capsys):
    (damaged / "model.pt2").unlink()
    assert cli_main(["verify", str(damaged)]) == 2
    assert "model.pt2: missing" in capsys.readouterr().err


def test_paths_outside_the_artifact_are_refused(damaged):
    _rewrite_manifest(damaged, lambda m: m["files"].update({"../../etc/passwd": {"bytes": 1, "sha256": "0"}}))
    with pytest.raises(ExportError, match="not a plain relative path"):
        read_manifest(damaged)


def test_forged_preprocessor_class_is_never_imported(damaged):
    _rewrite_manifest(damaged, lambda m: m.update(preprocess={"class": "os:system", "dir": "preprocess"}))
    with pytest.raises(ExportError, match="outside the torchwork namespace"):
        load_artifact(damaged)


def test_pt2_archive_that_needs_pickle_is_refused(damaged):
    """A forged model.pt2 (with a matching checksum) that would make torch.export.load unpickle."""
    path = damaged / "model.pt2"
    with zipfile.ZipFile(path) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:
        for info, data in entries:
            if info.filename.endswith("_weights_config.json"):
                data = data.replace(b'"use_pickle": false', b'"use_pickle": true', 1)
            target.writestr(info, data)
    from torchwork.deploy.trust import sha256_of

    _rewrite_manifest(damaged, lambda m: m["files"]["model.pt2"].update(bytes=path.stat().st_size,
                                                                       sha256=sha256_of(path)))
    with pytest.raises(ExportError, match="pickle"):
        load_artifact(damaged, "pt2")


def test_static_batch_export_is_probed_and_verified_at_its_own_batch_size(tmp_path):
    data = digits()
    out = tmp_path / "static"
    report = export(digits_mlp(), data["x_train"][:16], out, formats=("onnx",), dynamic_batch=False,
                    samples=data["x_test"].double().numpy(), targets=data["y_test"], verify_rounds=1, threads=1)
    assert report["ok"] and read_manifest(out).inputs[0].shape == [16, 64]
    assert json.loads((out / "parity.json").read_text())["probes"] == ["batch 16"]
    verified = report["verify"]
    assert verified["timing_batches"] == {"latency": 16, "throughput": 16}
    assert verified["inputs"]["count"] == 360 and verified["variants"]["onnx"]["top1_agreement"] == 1.0
    with pytest.raises(ConfigError, match=r"shape \[16, 64\]"):
        load_artifact(out)(data["x_test"][:3])
