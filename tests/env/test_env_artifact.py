"""`torchwork env check --artifact`: replaying the recorded inputs; serve / verify warn about a different machine."""

from __future__ import annotations

import io
import json
import os
import select
import shutil
import subprocess
import sys

import pytest
import torch
from env_helpers import child_env, run_cli
from fifo_guard import returns_within

from torchwork.deploy import export
from torchwork.deploy.manifest import EXAMPLE_OUTPUTS, MANIFEST, read_manifest
from torchwork.deploy.replay import replay_artifact
from torchwork.deploy.tensors import load_tensors, save_tensors
from torchwork.deploy.trust import file_table
from torchwork.env.drift import warn_if_machine_differs


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    out = tmp_path_factory.mktemp("env") / "artifact"
    export(model, torch.randn(5, 6), out, formats=("pt2", "onnx"))
    return out


def _copy(exported, tmp_path):
    target = tmp_path / "artifact"
    shutil.copytree(exported, target)
    return target


def _edit_manifest(directory, change):
    path = directory / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def test_export_records_the_snapshot_and_the_outputs_of_every_variant(exported):
    manifest = read_manifest(exported).to_json()
    assert manifest["environment"]["torch"] == torch.__version__ and manifest["environment"]["packages"]
    assert manifest["example_outputs"]["variants"] == ["eager", "pt2", "onnx"]
    recorded = load_tensors(exported / EXAMPLE_OUTPUTS)
    assert set(recorded) == {"eager.output_0", "pt2.output_0", "onnx.output_0"}
    assert recorded["eager.output_0"].shape == (5, 3)


@pytest.mark.slow  # a full `env check` in a subprocess: ~2.5 s quiet, more on a loaded machine
def test_an_artifact_exported_here_passes_env_check_artifact(exported):
    done = run_cli("env", "check", "--artifact", str(exported))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   artifact pt2 on its recorded inputs" in done.stdout
    assert "ok   artifact onnx on its recorded inputs" in done.stdout


@pytest.mark.slow  # a full `env check` in a subprocess: ~2.5 s quiet, more on a loaded machine
def test_a_tampered_recorded_output_fails_even_with_a_consistent_file_table(exported, tmp_path):
    artifact = _copy(exported, tmp_path)
    recorded = load_tensors(artifact / EXAMPLE_OUTPUTS)
    recorded["onnx.output_0"][2, 1] += 0.01  # what the exporting machine "computed"
    save_tensors(artifact / EXAMPLE_OUTPUTS, recorded)
    # A forger who also rewrites the checksums: the replay itself must catch it.
    _edit_manifest(artifact, lambda m: m.__setitem__("files", file_table(artifact)))
    results = {r.name: r for r in replay_artifact(artifact)}
    assert results["artifact pt2 on its recorded inputs"].ok
    onnx = results["artifact onnx on its recorded inputs"]
    assert not onnx.ok and "output 0 differs from the recording at index (2, 1)" in onnx.detail
    done = run_cli("env", "check", "--artifact", str(artifact))
    assert done.returncode == 1 and "FAIL artifact onnx" in done.stdout


def test_a_tampered_file_without_new_checksums_fails_as_damaged(exported, tmp_path):
    artifact = _copy(exported, tmp_path)
    data = bytearray((artifact / EXAMPLE_OUTPUTS).read_bytes())
    data[-3] ^= 0x40
    (artifact / EXAMPLE_OUTPUTS).write_bytes(bytes(data))
    [result] = replay_artifact(artifact)
    assert not result.ok and "SHA-256 differs" in result.detail


def test_an_artifact_without_recorded_outputs_says_to_re_export(exported, tmp_path):
    artifact = _copy(exported, tmp_path)
    _edit_manifest(artifact, lambda m: m.pop("example_outputs"))
    [result] = replay_artifact(artifact)
    assert not result.ok and "re-export it" in result.detail
    done = run_cli("env", "check", "--artifact", str(tmp_path))  # not an artifact at all
    assert done.returncode == 2 and "is not an artifact directory" in done.stderr


def _from_another_machine(manifest):
    manifest["environment"].update(torch="2.4.1+cu121", build="cuda 12.1")
    manifest["environment"]["packages"]["onnxruntime"] = "2.0.0"


def test_drift_from_the_exporting_machine_is_named(exported, tmp_path):
    assert warn_if_machine_differs(exported, io.StringIO()) == []  # exported here
    artifact = _copy(exported, tmp_path)
    _edit_manifest(artifact, _from_another_machine)
    stream = io.StringIO()
    found = warn_if_machine_differs(artifact, stream)
    assert [f.split(":")[0] for f in found] == [
        f"torch 2.4 exported it, this machine has {'.'.join(torch.__version__.split('.')[:2])}",
        "a cuda build exported it, this machine has a cpu build",
        f"ONNX Runtime 2.0.0 exported it, this machine has {__import__('onnxruntime').__version__}"]
    assert stream.getvalue().count("torchwork: warning: this machine differs") == 3


def test_drift_says_nothing_of_a_manifest_that_is_a_fifo_or_oversized(tmp_path):
    # serve / verify call it first: a FIFO would block them for ever, a huge file be read whole; the manifest
    # check right after reports either
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    os.mkfifo(artifact / MANIFEST)
    assert returns_within(10, lambda: warn_if_machine_differs(artifact, io.StringIO()), artifact / MANIFEST) == []
    (artifact / MANIFEST).unlink()
    with (artifact / MANIFEST).open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: over the 16 MiB a manifest may be
    assert warn_if_machine_differs(artifact, io.StringIO()) == []


def test_verify_warns_at_start(exported, tmp_path):
    artifact = _copy(exported, tmp_path)
    _edit_manifest(artifact, _from_another_machine)
    done = run_cli("verify", str(artifact), "--rounds", "1", "--variants", "onnx")
    assert "torchwork: warning: this machine differs" in done.stderr and "a cuda build exported it" in done.stderr


def test_serve_warns_at_start(exported, tmp_path):
    artifact = _copy(exported, tmp_path)
    _edit_manifest(artifact, _from_another_machine)
    code = f"import sys\nfrom torchwork.cli import main\nsys.exit(main(['serve', {str(artifact)!r}, '--port', '0']))"
    server = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              text=True, env=child_env())
    try:
        ready, _, _ = select.select([server.stderr], [], [], 60)  # never hang on a server that says nothing
        first = server.stderr.readline() if ready else ""
    finally:
        server.kill()
        server.wait(timeout=30)
        server.stderr.close()
    assert first.startswith("torchwork: warning: this machine differs") and "torch 2.4 exported it" in first


def test_env_diff_of_two_artifacts_names_the_risky_differences(exported, tmp_path):
    artifact = _copy(exported, tmp_path)
    _edit_manifest(artifact, _from_another_machine)
    done = run_cli("env", "diff", str(exported), str(artifact), "--json")
    assert done.returncode == 1, done.stderr
    whats = [d["what"] for d in json.loads(done.stdout)["differences"]]
    assert whats == ["torch minor version", "torch build", "ONNX Runtime version"]
    assert run_cli("env", "diff", str(exported), str(exported)).returncode == 0
