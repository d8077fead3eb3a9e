"""Models given as ``NAME=ARTIFACT`` in one real ``torchwork serve``: each with its own limits (batch size,
items, payload size) and metrics labels; reloaded from its own artifact folder by model control and SIGHUP
(verified again, switched atomically, the old one serving on a failure), with keys on."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from fifo_guard import returns_within
from serve_artifacts import build_digits_artifact, shared_digits_artifact
from serve_fixtures import ServerProcess, metric_value

pytestmark = pytest.mark.in_file_order(reason="one server of named artifacts: tests replace an artifact and reload it")

KEY = "a-test-key-for-named-models"


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory):
    first = shared_digits_artifact()
    second = build_digits_artifact(tmp_path_factory.mktemp("digits-seed1") / "artifact", seed=1)
    return first, second


@pytest.fixture(scope="module")
def named(artifacts, tmp_path_factory: pytest.TempPathFactory):
    first, _ = artifacts
    root = tmp_path_factory.mktemp("named")
    for name in ("alpha", "beta"):
        shutil.copytree(first.path, root / name)
    keys = root / "keys.txt"
    keys.write_text(KEY + "\n")
    server = ServerProcess([f"alpha={root / 'alpha'}", f"beta={root / 'beta'}"], None, "--enable-model-control",
                           "--api-key-file", str(keys), "--max-batch-size", "8",
                           "--model-limit", "alpha:max-batch-size=2", "--model-limit", "alpha:max-items=2",
                           "--model-limit", "alpha:max-body-bytes=2048", "--threads", "auto", log_dir=root, key=KEY)
    try:
        yield server, root
    finally:
        server.stop()


def infer(server: ServerProcess, name: str, images: np.ndarray, pad: int = 0):
    header = json.dumps({"inputs": [{"name": "images", "shape": list(images.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": images.nbytes}}],
                         "parameters": {"binary_data_output": False}}).encode() + b" " * pad
    return server.request("POST", f"/v2/models/{name}/infer", header + images.astype(np.float32).tobytes(),
                          headers={"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"})


def probabilities(answer: dict) -> np.ndarray:
    return np.array(next(o["data"] for o in answer["outputs"] if o["name"] == "probabilities"))


def load(server: ServerProcess, name: str, body=None, key: str | None = KEY):
    saved, server.key = server.key, key
    try:
        return server.request("POST", f"/v2/repository/models/{name}/load", body if body is not None else {},
                              timeout=120)
    finally:
        server.key = saved


def replace_folder(folder: Path, new: Path) -> None:
    """What an operator does: put the new artifact beside the old, then swap the folders."""
    staged = folder.with_name(folder.name + ".new")
    shutil.copytree(new, staged)
    shutil.rmtree(folder)
    staged.rename(folder)


@pytest.mark.slow(reason="starts a server of two named exported artifacts and loads both")
def test_each_model_has_its_own_limits_and_metrics(named, artifacts):
    server, _ = named
    images = artifacts[0].images
    status, _, answer = infer(server, "alpha", images[:3])
    assert status == 422 and "send 1 to 2" in answer["error"], answer  # alpha's own max-items
    assert infer(server, "beta", images[:3])[0] == 200  # the server's 64
    status, _, answer = infer(server, "alpha", images[:1], pad=3000)
    assert status == 413, answer  # alpha's own max-body-bytes (2048)
    assert infer(server, "beta", images[:1], pad=3000)[0] == 200
    assert infer(server, "alpha", images[:2])[0] == 200
    metrics = server.metrics()
    assert metric_value(metrics, 'torchwork_batch_size_bucket{model="alpha",le="+Inf"}') >= 1
    assert 'torchwork_batch_size_bucket{model="alpha",le="2"}' in metrics  # its largest batch: 2
    assert 'torchwork_batch_size_bucket{model="alpha",le="8"}' not in metrics
    assert 'torchwork_batch_size_bucket{model="beta",le="8"}' in metrics
    assert metric_value(metrics, 'torchwork_requests_total{model="alpha",status="413"}') == 1
    assert metric_value(metrics, 'torchwork_requests_total{model="beta",status="200"}') == 2


def test_each_model_process_chose_its_threads_and_said_why(named):
    server, _ = named
    from torchwork.threads import usable_cpus

    for name in ("alpha", "beta"):
        line = next(line for line in server.lines if f"model {name}: the model process" in line)
        count = int(line.split(" runs ")[1].split()[0])
        assert 1 <= count <= usable_cpus() and f"(auto: {usable_cpus()} usable CPU" in line, line


def test_a_named_artifact_reloads_from_its_own_folder(named, artifacts):
    server, root = named
    first, second = artifacts
    before = probabilities(infer(server, "alpha", first.images[:1])[2])
    replace_folder(root / "alpha", second.path)
    assert load(server, "alpha", key=None)[0] == 401  # keys on: model control needs one too
    status, _, answer = load(server, "alpha")
    assert status == 200 and answer["version"] == "2", answer
    after = probabilities(infer(server, "alpha", first.images[:1])[2])
    assert not np.allclose(before, after, atol=1e-4)  # the other model serves now
    assert server.request("GET", "/v2/models/alpha")[2]["versions"] == ["2"]
    assert "model alpha: version 2 serves now (was 1)" in server.stderr()
    status, _, answer = load(server, "alpha", {"parameters": {"version": "1"}})
    assert status == 400 and "holds one version" in answer["error"], answer  # only its own folder


def test_a_bad_artifact_keeps_the_old_one_serving(named, artifacts):
    server, root = named
    serving = server.request("GET", "/v2/models/beta")[2]["versions"][0]
    model_file = next(p for p in (root / "beta").iterdir() if p.suffix in (".onnx", ".pt2"))
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # its checksum no longer matches the manifest
    model_file.write_bytes(bytes(data))
    status, _, answer = load(server, "beta")
    assert status == 400 and "failed to load" in answer["error"] and f"Version {serving} keeps serving" in \
        answer["error"], answer
    assert infer(server, "beta", artifacts[0].images[:1])[0] == 200
    assert server.request("GET", "/v2/models/beta")[2]["versions"] == [serving]


def test_sighup_reloads_a_named_artifact_only_when_its_folder_changed(named, artifacts):
    server, root = named
    alpha = server.request("GET", "/v2/models/alpha")[2]["versions"][0]
    replace_folder(root / "beta", artifacts[1].path)  # a new manifest; alpha's folder is as it was loaded
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 120
    while server.request("GET", "/v2/models/beta")[2]["versions"] != ["2"]:
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.2)
    expected = probabilities(infer(server, "alpha", artifacts[0].images[:1])[2])  # alpha serves the seed-1 model
    np.testing.assert_allclose(probabilities(infer(server, "beta", artifacts[0].images[:1])[2]), expected, atol=1e-5)
    assert server.request("GET", "/v2/models/alpha")[2]["versions"] == [alpha]  # unchanged: not reloaded


def test_sighup_on_a_manifest_swapped_for_a_fifo_or_a_huge_file_reloads_and_says_why(tmp_path):
    # newest() runs on the event loop at SIGHUP: a FIFO read there would freeze the server. Unreadable, the
    # folder counts as changed, and the reload reports the folder's error (the old version keeps serving).
    from torchwork.deploy.manifest import read_manifest
    from torchwork.errors import ExportError
    from torchwork.serve.repository import ArtifactFolder

    folder = tmp_path / "artifact"
    folder.mkdir()
    manifest = folder / "manifest.json"
    manifest.write_text("{}")
    source = ArtifactFolder("alpha", folder, lambda path: (read_manifest(path), None))
    assert source.newest() == "1"  # unchanged since loaded
    manifest.unlink()
    os.mkfifo(manifest)
    assert returns_within(10, source.newest, manifest) is None
    with pytest.raises(ExportError, match="manifest.json"):
        returns_within(10, lambda: source.reload(None), manifest)
    manifest.unlink()
    with manifest.open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: over the 16 MiB a manifest may be
    assert source.newest() is None
    with pytest.raises(ExportError, match="over the"):
        source.reload(None)
    assert source.loaded == 1


# ---------------------------------------------------------------- the settings, checked before any model loads
def test_model_limits_are_checked_before_any_model_loads():
    from torchwork.errors import ConfigError
    from torchwork.serve import ServeConfig
    from torchwork.serve.server import model_limits

    config = ServeConfig()
    assert model_limits(["a:max-queue=4", "a:max-wait-ms=0.5"], ["a", "b"], config) == \
        {"a": {"max_queue": 4, "max_wait_ms": 0.5}}
    for flag, words in [("c:max-queue=4", "no model 'c' is served"), ("a:threads=2", "not a setting a model"),
                        ("a:max-queue=four", "not an integer"), ("a:max-wait-ms=nan", "max_wait_ms=nan"),
                        ("a:timeout-s=inf", "timeout_s=inf"), ("a:max-batch-size=0", "max_batch_size=0"),
                        ("a-max-queue=4", "NAME:SETTING=VALUE")]:
        with pytest.raises(ConfigError, match=words):
            model_limits([flag], ["a", "b"], config)


def test_each_models_batcher_deadlines_and_schema_take_its_own_limits():
    import torch

    from torchwork.serve import ServeConfig, TorchPredictor, create_app
    from torchwork.serve.repository import ModelSpec

    specs = [ModelSpec(name, "1", TorchPredictor(torch.nn.Linear(4, 2), item_shape=(4,)), limits=limits)
             for name, limits in [("small", {"max_queue": 3, "max_batch_size": 2, "timeout_s": 1.5, "max_items": 2}),
                                  ("large", {})]]
    slots = create_app(None, ServeConfig(max_batch_size=16), models=specs).state.torchwork_slots
    small, large = slots["small"].state, slots["large"].state
    assert (small.batcher.rule.max_queue, small.batcher.rule.max_batch_size, small.deadlines.timeout_s) == (3, 2, 1.5)
    assert (large.batcher.rule.max_queue, large.batcher.rule.max_batch_size, large.deadlines.timeout_s) == \
        (1024, 16, 30.0)
    assert small.v2.limits.max_items == 2 and large.v2.limits.max_items == 64
    from torchwork.errors import ConfigError

    with pytest.raises(ConfigError, match="not settings a model may have its own of"):
        create_app(None, ServeConfig(), models=[ModelSpec("x", "1", specs[1].predictor, limits={"port": 1})])
