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
    key_file.chmod(0o644)  # readable by everyone: the server warns at start
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
    server, key_file = keyed
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
    time.sleep(1.1)  # refusals are logged at most once a second per reason
    assert ask(server, "/predict%0a2030-01-01%20WARNING%20torchwork.serve:%20forged", None)[0] == 401
    log = server.stderr()
    assert "refused POST /predict from 127.0.0.1:" in log and "API key" in log
    assert WRONG_KEY not in log and FILE_KEY not in log
    assert "\n2030-01-01" not in log and "/predict\\n2030-01-01" in log  # the %0a escaped, no forged line
    assert f"is readable by other users (mode 644); make it private with: chmod 600 {key_file}" in log


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
    # an editor's truncate-then-write, seen between the two: an empty file keeps the keys in force
    hangup_keeps_the_keys(server, lambda: key_file.write_text(""), "holds no key")
    # a FIFO (the read would hold the event loop) and a link to /dev/zero (never ends): refused, keys kept
    key_file.unlink()
    os.mkfifo(key_file)
    hangup_keeps_the_keys(server, lambda: None, "is not a regular file (a FIFO)")
    key_file.unlink()
    key_file.symlink_to("/dev/zero")
    hangup_keeps_the_keys(server, lambda: None, "is not a regular file (a character device)")
    key_file.unlink()
    key_file.write_text(f"{NEW_KEY}\n")
    assert server.process.poll() is None  # SIGHUP ended neither the server nor its model process
    import psutil

    assert any(child.is_running() for child in psutil.Process(server.process.pid).children())
    server.key = NEW_KEY


def hangup_keeps_the_keys(server: ServerProcess, change, reason: str) -> None:
    """``change`` the key file, send SIGHUP: the log says the keys in force are kept and why, and they are."""
    kept = server.stderr().count("kept the API keys in force")
    change()
    server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while server.stderr().count("kept the API keys in force") == kept:
        assert time.monotonic() < deadline, server.stderr()
        time.sleep(0.1)
    assert reason in server.stderr().rsplit("kept the API keys in force", 1)[1]
    assert ask(server, "/predict", NEW_KEY, body={"inputs": ["fine"]})[0] == 200
    assert ask(server, "/predict", ENV_KEY, body={"inputs": ["fine"]})[0] == 200


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


def test_a_digest_line_is_one_whatever_the_case_of_its_prefix():
    digest = hashlib.sha256(FILE_KEY.encode()).hexdigest().upper()
    ring = KeyRing.from_lines([f"SHA256:{digest}"])
    assert ring.allows(f"Bearer {FILE_KEY}")
    assert not ring.allows(f"Bearer SHA256:{digest}")  # the digest is not a key itself


def test_a_byte_order_mark_is_dropped_and_a_non_ascii_key_refused_naming_its_line(tmp_path):
    key_file = tmp_path / "keys.txt"
    key_file.write_bytes(b"\xef\xbb\xbf" + FILE_KEY.encode() + b"\n")
    assert KeyRing.load(str(key_file), environ={}).allows(f"Bearer {FILE_KEY}")
    for key in ("schlüssel-0123456789abcdef", "key-0123456789abcdef\x07"):
        with pytest.raises(ConfigError, match="line 2: a key must be printable ASCII") as caught:
            KeyRing.from_lines(["# ok", key], "keys.txt")
        assert key not in str(caught.value)


def load_within(path: Path, seconds: float = 10.0):
    """KeyRing.load(path) from a thread, so that a read that blocks fails the test instead of hanging it."""
    import threading

    outcome: list = []

    def run():
        try:
            outcome.append(KeyRing.load(str(path), environ={}))
        except ConfigError as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"reading {path} did not return within {seconds} s"
    return outcome[0]


def test_a_key_file_is_read_only_as_a_bounded_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    linked = tmp_path / "linked"
    linked.symlink_to("/dev/zero")
    for path, kind in ((fifo, "FIFO"), (linked, "character device"), (tmp_path, "directory")):
        error = load_within(path)
        assert isinstance(error, ConfigError) and f"is not a regular file (a {kind})" in str(error), error
    large = tmp_path / "large.txt"
    large.write_text("k" * (2 << 20))  # one "key" of 2 MiB
    error = load_within(large)
    assert isinstance(error, ConfigError) and "is larger than 1048576 bytes" in str(error), error
    inside = tmp_path / "keys.txt"
    inside.write_text(f"{FILE_KEY}\n")
    (tmp_path / "link.txt").symlink_to(inside)  # a link to a regular file is a key file like any
    assert load_within(tmp_path / "link.txt").allows(f"Bearer {FILE_KEY}")


def test_a_reload_keeps_the_keys_when_the_file_is_emptied_or_not_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv(keys_module.ENVIRONMENT, ENV_KEY)
    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{FILE_KEY}\n")
    check = keys_module.KeyCheck(KeyRing.load(str(key_file)), key_file=str(key_file))
    key_file.write_text("")  # an editor's truncate, before its write
    check.rotate()
    assert check.ring.allows(f"Bearer {FILE_KEY}") and check.ring.allows(f"Bearer {ENV_KEY}")
    key_file.unlink()
    os.mkfifo(key_file)
    check.rotate()
    assert check.ring.allows(f"Bearer {FILE_KEY}")


def test_a_refused_paths_control_characters_are_escaped_in_the_log(caplog):
    check = keys_module.KeyCheck(KeyRing.from_lines([FILE_KEY]))
    scope = {"type": "http", "method": "GET", "path": "/x\n2030-01-01 WARNING forged\x1b[2J", "headers": [],
             "client": ("127.0.0.1", 5000)}
    with caplog.at_level("WARNING", logger="torchwork.serve"):
        assert check.refusal(scope) is not None
    assert caplog.messages == ["refused GET /x\\n2030-01-01 WARNING forged\\x1b[2J from 127.0.0.1:5000: missing "
                               "API key"]


def test_only_a_key_file_others_may_read_gets_a_warning(tmp_path):
    from torchwork.serve.key_file import permission_warning

    key_file = tmp_path / "keys.txt"
    key_file.write_text(f"{FILE_KEY}\n")
    key_file.chmod(0o640)
    assert "(mode 640); make it private with: chmod 600" in permission_warning(str(key_file))
    key_file.chmod(0o600)
    assert permission_warning(str(key_file)) is None


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


def test_a_key_file_that_is_a_fifo_refuses_the_start_in_one_line(models_dir, tmp_path):
    fifo = tmp_path / "keys.txt"
    os.mkfifo(fifo)
    result = run_serve(models_dir, "--api-key-file", str(fifo), timeout=30)
    assert result.returncode == 2, result.stderr
    assert "is not a regular file" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


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
    """Its key encrypted with a passphrase, given in TORCHWORK_SSL_KEYFILE_PASSWORD (the bad files: in
    test_serve_start_failures.py)."""
    if subprocess.run(["which", "openssl"], capture_output=True).returncode:
        pytest.skip("openssl is not installed")
    cert, plain_key = self_signed(tmp_path)
    key = tmp_path / "locked.pem"
    subprocess.run(["openssl", "pkey", "-in", str(plain_key), "-aes256", "-passout", "pass:s3cret", "-out", str(key)],
                   check=True, capture_output=True)
    context = ssl.create_default_context(cafile=str(cert))  # trusts exactly this certificate, hostname checked
    server = ServerProcess(models_dir, "text_predictor", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
                           "--no-model-process", log_dir=tmp_path, tls=context,
                           env={"TORCHWORK_SSL_KEYFILE_PASSWORD": "s3cret"})
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
