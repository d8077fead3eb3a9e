"""Several models in one real ``torchwork serve`` (a model folder ``models/NAME/VERSION/``), each with its own
batcher, model process and metrics; a new version loaded under load with zero failed requests; a bad version
that keeps the old one serving; model control refused for a path outside the model folder, from another
machine, and when it is off."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import threading
import time

import numpy as np
import pytest
from serve_artifacts import shared_digits_artifact
from serve_fixtures import ServerProcess, metric_value

pytestmark = pytest.mark.in_file_order(reason="one repository server: tests add versions and reload them")

LOAD_WORKERS = 16


@pytest.fixture(scope="module")
def digits_artifact():
    return shared_digits_artifact()


@pytest.fixture(scope="module")
def repository(digits_artifact, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("models")
    for name in ("alpha", "beta"):
        shutil.copytree(digits_artifact.path, root / name / "1")
    server = ServerProcess(root, None, "--enable-model-control", "--max-batch-size", "8", log_dir=root.parent)
    try:
        yield server, root
    finally:
        server.stop()


def infer(server: ServerProcess, name: str, images: np.ndarray, path: str | None = None):
    header = json.dumps({"inputs": [{"name": "images", "shape": list(images.shape), "datatype": "FP32",
                                     "parameters": {"binary_data_size": images.nbytes}}],
                         "parameters": {"binary_data_output": False}}).encode()
    return server.request("POST", path or f"/v2/models/{name}/infer", header + images.astype(np.float32).tobytes(),
                          headers={"Inference-Header-Content-Length": str(len(header)),
                                   "Content-Type": "application/octet-stream"})


def load(server: ServerProcess, name: str, version: str | None = None, body=None):
    document = body if body is not None else ({"parameters": {"version": version}} if version else {})
    return server.request("POST", f"/v2/repository/models/{name}/load", document, timeout=120)


@pytest.mark.slow(reason="loads two exported artifacts into a running repository server")
def test_two_models_each_with_its_own_metrics(repository, digits_artifact):
    server, _ = repository
    images = digits_artifact.images[:2]
    index = server.request("POST", "/v2/repository/index", {})[2]
    assert sorted((m["name"], m["version"], m["state"]) for m in index) == [("alpha", "1", "READY"),
                                                                             ("beta", "1", "READY")]
    metadata = server.request("GET", "/v2/models/alpha")[2]
    assert metadata["inputs"][0]["name"] == "images" and metadata["inputs"][0]["shape"][1:] == [1, 8, 8]
    before = server.metrics()
    answers = [infer(server, "alpha", images) for _ in range(3)] + [infer(server, "beta", images) for _ in range(5)]
    assert all(status == 200 for status, _, _ in answers), answers
    alpha, beta = answers[0][2]["outputs"], answers[3][2]["outputs"]
    assert alpha == beta  # the same artifact under two names: the same answers
    after = server.metrics()

    def count(text: str, name: str) -> float:
        try:
            return metric_value(text, f'torchwork_requests_total{{model="{name}",status="200"}}')
        except AssertionError:
            return 0.0

    assert count(after, "alpha") - count(before, "alpha") == 3
    assert count(after, "beta") - count(before, "beta") == 5
    assert after.count("# TYPE torchwork_requests_total counter") == 1  # one HELP/TYPE, samples per model
    assert server.request("POST", "/predict", {"inputs": [[0.0]]})[0] == 404  # /predict: single-model servers


def hammer(server: ServerProcess, images: np.ndarray, stop: threading.Event, results: list) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        status, _, body = infer(server, "alpha", images)
        results.append((time.monotonic(), time.perf_counter() - started, status, body))


def test_a_new_version_loads_under_load_with_no_failed_request(repository, digits_artifact):
    server, root = repository
    images = digits_artifact.images[:1]
    expected = infer(server, "alpha", images)[2]["outputs"]
    shutil.copytree(digits_artifact.path, root / "alpha" / "2")
    stop, results = threading.Event(), []
    clients = [threading.Thread(target=hammer, args=(server, images, stop, results)) for _ in range(LOAD_WORKERS)]
    for client in clients:
        client.start()
    time.sleep(2.0)
    swap_started = time.monotonic()
    status, _, answer = load(server, "alpha")
    swap_ended = time.monotonic()
    time.sleep(1.0)
    stop.set()
    for client in clients:
        client.join(60)
    assert status == 200 and answer["version"] == "2", answer
    failures = [(s, b) for _, _, s, b in results if s != 200]
    assert not failures, failures[:3]
    def probabilities(outputs: list) -> np.ndarray:
        return np.array(next(o["data"] for o in outputs if o["name"] == "probabilities"))

    for _, _, _, body in results:  # batched with others or alone: the same answer up to float rounding
        np.testing.assert_allclose(probabilities(body["outputs"]), probabilities(expected), atol=1e-5)
    during = [r for r in results if swap_started <= r[0] <= swap_ended]
    assert len(during) > 0 and len(results) > 100  # requests were answered while the new version loaded
    assert server.request("GET", "/v2/models/alpha")[2]["versions"] == ["2"]
    assert server.request("GET", "/v2/models/alpha/versions/1/ready")[0] == 404
    assert "model alpha: version 2 serves now (was 1)" in server.stderr()


def test_a_bad_version_keeps_the_old_one_serving_and_says_why(repository, digits_artifact):
    server, root = repository
    serving = server.request("GET", "/v2/models/beta")[2]["versions"][0]
    bad = root / "beta" / "7"
    shutil.copytree(digits_artifact.path, bad)
    model_file = next(p for p in bad.iterdir() if p.suffix in (".onnx", ".pt2"))
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: its checksum no longer matches the manifest
    model_file.write_bytes(bytes(data))
    status, _, answer = load(server, "beta", "7")
    assert status == 400 and "failed to load" in answer["error"] and f"Version {serving} keeps serving" in \
        answer["error"], answer
    assert "artifact beta/7 is damaged" in answer["error"], answer  # a path relative to the model folder
    assert infer(server, "beta", digits_artifact.images[:1])[0] == 200
    assert server.request("GET", "/v2/models/beta")[2]["versions"] == [serving]
    status, _, answer = load(server, "beta", "9")
    assert status == 404 and "no version '9'" in answer["error"]  # not in the folder
    for error in (server.stderr(), answer["error"]):  # the operator's log names the folder; a client never
        assert (str(root) in error) == (error is not answer["error"]), error


def test_model_control_refuses_paths_outside_the_model_folder(repository, digits_artifact, tmp_path):
    server, root = repository
    for body, words in [({"parameters": {"version": "../alpha/1"}}, "not a plain name"),
                        ({"parameters": {"path": "/etc"}}, "only \"version\""),
                        ({"parameters": {"version": 2}}, "must be a string"),
                        ([1], "JSON object")]:
        status, _, answer = load(server, "beta", body=body)
        assert status == 400 and words in answer["error"], answer
    outside = tmp_path / "outside"
    shutil.copytree(digits_artifact.path, outside)
    (root / "beta" / "8").symlink_to(outside, target_is_directory=True)
    status, _, answer = load(server, "beta", "8")
    assert status == 400 and "leads outside the model folder" in answer["error"], answer
    assert str(root) not in answer["error"] and str(outside) not in answer["error"]
    (root / "beta" / "8").unlink()
    assert load(server, "nobody")[0] == 404


def test_sighup_loads_every_models_newest_version(repository, digits_artifact):
    server, root = repository
    shutil.copytree(digits_artifact.path, root / "beta" / "10")  # newer than 7 and 9 by value
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 120
    while server.request("GET", "/v2/models/beta")[2]["versions"] != ["10"]:
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.2)
    assert infer(server, "beta", digits_artifact.images[:1])[0] == 200
    serving = server.request("GET", "/v2/models/alpha")[2]["versions"][0]
    assert f"model alpha: version {serving} serves now (was {serving})" not in server.stderr()  # already newest


def non_loopback_address() -> str | None:
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


def test_model_control_is_refused_from_another_machine_and_when_off(digits_artifact, tmp_path):
    address = non_loopback_address()
    root = tmp_path / "models"
    shutil.copytree(digits_artifact.path, root / "alpha" / "1")
    server = ServerProcess(root, None, "--enable-model-control", "--host", "0.0.0.0", "--insecure-no-auth",
                           "--no-model-process", log_dir=tmp_path)
    try:
        if address is None:
            pytest.skip("this machine has no address but loopback")
        import http.client

        conn = http.client.HTTPConnection(address, server.port, timeout=30)
        conn.request("POST", "/v2/repository/models/alpha/load", b"{}", {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 403 and "this machine only" in answer["error"], answer
    finally:
        server.stop()
    server = ServerProcess(root, None, "--no-model-process", log_dir=tmp_path)
    try:
        status, _, answer = load(server, "alpha")
        assert status == 403 and "--enable-model-control" in answer["error"]
    finally:
        server.stop()


def test_a_link_out_of_the_model_folder_refuses_the_start_as_a_load_refuses_it(digits_artifact, tmp_path):
    from torchwork.errors import ConfigError
    from torchwork.serve.server import served_sources

    outside = tmp_path / "outside"
    shutil.copytree(digits_artifact.path, outside / "1")
    root = tmp_path / "models"
    shutil.copytree(digits_artifact.path, root / "alpha" / "1")
    assert served_sources([str(root)], None) == [("alpha", str((root / "alpha" / "1").resolve()), root)]
    (root / "alpha" / "2").symlink_to(outside / "1", target_is_directory=True)  # the newest version links out
    with pytest.raises(ConfigError, match="alpha/2 leads outside the model folder; .* serve it as alpha=ARTIFACT"):
        served_sources([str(root)], None)
    (root / "alpha" / "2").unlink()
    (root / "beta").symlink_to(outside, target_is_directory=True)  # a whole model folder that links out
    with pytest.raises(ConfigError, match="beta/1 leads outside the model folder"):
        served_sources([str(root)], None)
    (root / "beta").unlink()
    (root / "alpha" / "3").symlink_to("1", target_is_directory=True)  # a link that stays inside is fine
    assert served_sources([str(root)], None)[0][1] == str((root / "alpha" / "1").resolve())
