"""API keys and TLS on a real ``torchwork serve``: missing, wrong and right keys, the open probes, refusals
counted and logged without the key, rotation by editing the key file and SIGHUP, the refusal to serve a
non-loopback address without keys, and HTTPS with a self-signed certificate made here."""

from __future__ import annotations

import hashlib
import http.client
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_fixtures import HERE, SRC, ServerProcess, metric_value

from torchwork.errors import ConfigError
from torchwork.serve import keys as keys_module
from torchwork.serve.keys import KeyRing

pytestmark = pytest.mark.in_file_order(reason="one keyed server: a test rotates its key file and sends SIGHUP")

FILE_KEY = "file-key-0123456789abcdef"
ENV_KEY = "env-key-0123456789abcdef"
NEW_KEY = "rotated-key-0123456789abcdef"
WRONG_KEY = "wrong-key-0123456789abcdef"


@pytest.fixture(scope="module")
def keyed(models_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("keys")
    key_file = folder / "keys.txt"
    key_file.write_text(f"# the team's key\n{FILE_KEY}\n")
    server = ServerProcess(models_dir, "text_predictor", "--api-key-file", str(key_file), "--name", "text",
                           log_dir=folder, env={"TORCHWORK_API_KEYS": ENV_KEY}, key=FILE_KEY)
    try:
        yield server, key_file
    finally:
        server.stop()


def ask(server: ServerProcess, path: str, key: str | None, method: str = "POST", body=None):
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    saved, server.key = server.key, None
    try:
        return server.request(method, path, body, headers=headers)
    finally:
        server.key = saved


V2_BODY = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a lovely film"]}]}


def test_missing_and_wrong_keys_get_401_and_right_ones_200(keyed):
    server, _ = keyed
    for key in (None, WRONG_KEY, "", f"{FILE_KEY}x"):
        status, headers, answer = ask(server, "/predict", key, body={"inputs": ["a lovely film"]})
        assert status == 401 and headers["www-authenticate"].startswith("Bearer"), (key, answer)
        assert "Authorization: Bearer KEY" in answer["detail"]
        status, _, answer = ask(server, "/v2/models/text/infer", key, body=V2_BODY)
        assert status == 401 and set(answer) == {"error"}
        assert ask(server, "/metrics", key, method="GET")[0] == 401
        assert ask(server, "/docs", key, method="GET")[0] == 401
    for key in (FILE_KEY, ENV_KEY):
        assert ask(server, "/predict", key, body={"inputs": ["a lovely film"]})[0] == 200
        assert ask(server, "/v2/models/text/infer", key, body=V2_BODY)[0] == 200
    for path in ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"):  # probes need no key
        assert ask(server, path, None, method="GET")[0] == 200, path
    metrics = server.metrics()
    assert metric_value(metrics, 'torchwork_auth_failures_total{reason="missing"}') >= 4
    assert metric_value(metrics, 'torchwork_auth_failures_total{reason="wrong"}') >= 12
    log = server.stderr()
    assert "refused POST /predict from 127.0.0.1:" in log and "API key" in log
    assert WRONG_KEY not in log and FILE_KEY not in log


def test_tritonclient_sends_its_key_as_a_header(keyed):
    import numpy as np
    import tritonclient.http as httpclient

    server, _ = keyed
    client = httpclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    text = httpclient.InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"a lovely film"], dtype=object))
    result = client.infer("text", [text], headers={"Authorization": f"Bearer {ENV_KEY}"})
    assert result.as_numpy("probabilities").shape == (1, 2)
    with pytest.raises(Exception, match="401|API key"):
        client.infer("text", [text])
    client.close()


def test_editing_the_key_file_and_sighup_rotates_the_keys(keyed):
    server, key_file = keyed
    key_file.write_text(f"{NEW_KEY}\n")
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while ask(server, "/predict", NEW_KEY, body={"inputs": ["fine"]})[0] != 200:
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.1)
    assert ask(server, "/predict", FILE_KEY, body={"inputs": ["fine"]})[0] == 401
    assert ask(server, "/predict", ENV_KEY, body={"inputs": ["fine"]})[0] == 200  # the environment's stays
    # a key file that became invalid keeps the keys in force, and says why
    key_file.write_text("short\n")
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "kept the API keys in force" not in server.stderr():
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.1)
    assert ask(server, "/predict", NEW_KEY, body={"inputs": ["fine"]})[0] == 200
    assert server.process.poll() is None  # SIGHUP ended neither the server nor its model process
    import psutil

    assert any(child.is_running() for child in psutil.Process(server.process.pid).children())
    server.key = NEW_KEY


# ---------------------------------------------------------------- the key ring itself
def test_every_digest_is_compared_in_constant_time(monkeypatch):
    ring = KeyRing.from_lines(["a" * 16, "b" * 16, "c" * 16])
    calls = []
    real = keys_module.hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", counting)
    assert ring.allows("Bearer " + "a" * 16)
    assert len(calls) == 3  # no early exit on the first match
    assert all(a == hashlib.sha256(b"a" * 16).digest() for a, _ in calls)
    assert not ring.allows("Basic " + "a" * 16) and not ring.allows("Bearer") and not ring.allows(None)


def test_bad_key_files_are_refused_naming_the_line_not_the_key(tmp_path):
    with pytest.raises(ConfigError, match="line 2: a key must be at least 16") as caught:
        KeyRing.from_lines(["# ok", "tooshort-secret"], "keys.txt")
    assert "tooshort-secret" not in str(caught.value)
    with pytest.raises(ConfigError, match="64 hex digits"):
        KeyRing.from_lines(["sha256:abc"])
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(ConfigError, match="holds no key"):
        KeyRing.load(str(empty), environ={})
    assert KeyRing.load(None, environ={}) is None


# ---------------------------------------------------------------- binding beyond loopback
def run_serve(models_dir: Path, *flags: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}
    env.pop("TORCHWORK_API_KEYS", None)
    return subprocess.run([sys.executable, "-m", "torchwork.cli", "serve", str(models_dir), "--factory",
                           "serve_models:text_predictor", "--port", "0", *flags],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_a_public_address_without_keys_refuses_to_start_with_how_to_add_one(models_dir):
    started = time.monotonic()
    result = run_serve(models_dir, "--host", "0.0.0.0")
    assert result.returncode == 2, result.stderr
    assert "--api-key-file FILE" in result.stderr and "--insecure-no-auth" in result.stderr
    assert "Traceback" not in result.stderr and time.monotonic() - started < 30  # before the model loads


def test_insecure_no_auth_serves_a_public_address_with_a_warning(models_dir, tmp_path):
    server = ServerProcess(models_dir, "text_predictor", "--host", "0.0.0.0", "--insecure-no-auth",
                           "--no-model-process", log_dir=tmp_path)
    try:
        assert server.predict(["a lovely film"])[0] == 200
        assert "with no API key (--insecure-no-auth)" in server.stderr()
    finally:
        server.stop()


# ---------------------------------------------------------------- TLS
def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_tls_with_a_self_signed_certificate(models_dir, tmp_path):
    if subprocess.run(["which", "openssl"], capture_output=True).returncode:
        pytest.skip("openssl is not installed")
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))  # trusts exactly this certificate, hostname checked
    server = ServerProcess(models_dir, "text_predictor", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
                           "--no-model-process", log_dir=tmp_path, tls=context)
    try:
        assert "listening on https://127.0.0.1:" in server.lines[-1]
        status, _, answer = server.predict(["a lovely film"])
        assert status == 200 and len(answer["predictions"]) == 1
        plain = ServerProcess.__new__(ServerProcess)
        plain.port, plain.tls, plain.key = server.port, None, None
        with pytest.raises((OSError, http.client.HTTPException)):
            plain.request("GET", "/healthz", timeout=5)
    finally:
        server.stop()
    result = run_serve(models_dir, "--ssl-certfile", str(cert))
    assert result.returncode == 2 and "needs both --ssl-certfile" in result.stderr
