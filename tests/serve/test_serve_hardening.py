"""What an attacker or a careless client does to a real ``torchwork serve`` process, over real sockets.

Non-JSON bodies (415), slow request heads and bodies, idle sockets, too many connections, clients that
disconnect mid-body, one client's huge requests beside light ones, the ready line, a run folder given
instead of its artifact.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fifo_guard import returns_within
from serve_fixtures import HERE, SRC, ServerProcess, metric_value

# Small bounds, so that each case takes seconds: head 3 s, body 2 s, idle 2 s, 4 connections.
BOUNDS = ("--head-timeout-s", "3", "--body-timeout-s", "2", "--idle-timeout-s", "2", "--max-connections", "4",
          "--log-level", "info")
GIVE_UP_S = 20  # a connection the server never closes fails the test after this long


@pytest.fixture(scope="module", params=["h11", "httptools"])
def guarded_server(request: pytest.FixtureRequest, models_dir: Path) -> Iterator[ServerProcess]:
    """The guard over each HTTP parser torchwork serve runs on (--http)."""
    if request.param == "httptools":
        pytest.importorskip("httptools")
    server = ServerProcess(models_dir, "text_predictor", *BOUNDS, "--http", request.param)
    try:
        yield server
    finally:
        server.stop()


def connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=GIVE_UP_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a test timeout if it never does)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def status_and_body(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def http_request(server: ServerProcess, method: str, path: str, body: bytes = b"",
                 headers: dict[str, str] | None = None) -> tuple[int, dict]:
    """One request on its own connection, with exactly the headers given (http.client adds none of its own
    but Host, Accept-Encoding and Content-Length)."""
    conn = server.connection()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# ---------------------------------------------------------------- 415 for anything but JSON
def test_predict_accepts_only_a_json_content_type(text_server):
    body = json.dumps({"inputs": ["a lovely film"]}).encode()
    for content_type in [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                         "application/jsonx", "text/json"]:
        status, answer = http_request(text_server, "POST", "/predict", body,
                                      {"Content-Type": content_type} if content_type else {})
        assert status == 415, (content_type, answer)
        assert "Content-Type: application/json" in answer["detail"]
        assert (content_type or "no Content-Type header") in answer["detail"]
    for content_type in ["application/json", "application/json; charset=utf-8", "Application/JSON"]:
        status, answer = http_request(text_server, "POST", "/predict", body, {"Content-Type": content_type})
        assert status == 200 and len(answer["predictions"]) == 1, (content_type, answer)
    assert 'torchwork_requests_total{status="415"}' in text_server.metrics()


# ---------------------------------------------------------------- slow heads and bodies, idle sockets, the cap
def test_a_slowloris_head_gets_408_and_is_closed(guarded_server):
    sock = connect(guarded_server)
    sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
    raw = b""
    for i in range(GIVE_UP_S // 2):  # one more header line every 2 s, as a slowloris client does
        sock.settimeout(2)
        try:
            raw = read_until_closed(sock)
            break
        except TimeoutError:
            sock.sendall(f"X-Line-{i}: {i}\r\n".encode())
        except OSError:  # reset while sending: closed without an answer
            break
    sock.close()
    assert raw, f"the server kept a request head open for {GIVE_UP_S} s"
    status, answer = status_and_body(raw)
    assert status == 408 and "--head-timeout-s" in answer["detail"]
    assert metric_value(guarded_server.metrics(), 'torchwork_connections_closed_total{reason="head_timeout"}') >= 1


def test_a_body_that_never_completes_gets_408(guarded_server):
    sock = connect(guarded_server)
    sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                 b'{"inputs": ')
    status, answer = status_and_body(read_until_closed(sock))
    sock.close()
    assert status == 408 and "--body-timeout-s" in answer["detail"]
    metrics = guarded_server.metrics()
    assert metric_value(metrics, 'torchwork_connections_closed_total{reason="body_timeout"}') >= 1
    assert metric_value(metrics, 'torchwork_requests_total{status="408"}') >= 1


def test_idle_connections_are_closed_new_or_kept_alive(guarded_server):
    silent = connect(guarded_server)
    assert read_until_closed(silent) == b""  # never sent a byte: closed, no answer
    silent.close()
    conn = guarded_server.connection(timeout=GIVE_UP_S)
    status, _, _ = guarded_server.request("GET", "/healthz", connection=conn)
    assert status == 200
    assert conn.sock.recv(1) == b""  # kept alive after its answer, then closed when idle
    conn.close()
    assert metric_value(guarded_server.metrics(), 'torchwork_connections_closed_total{reason="idle_timeout"}') >= 1


def test_connections_past_the_cap_get_503_then_service_resumes(guarded_server):
    held = []
    for _ in range(4):  # the cap: each one answered and kept alive
        conn = guarded_server.connection()
        assert guarded_server.request("GET", "/healthz", connection=conn)[0] == 200
        held.append(conn)
    status, headers, answer = guarded_server.request("GET", "/healthz")
    assert status == 503 and headers["retry-after"] == "1" and "--max-connections" in answer["detail"]
    for conn in held:
        conn.close()
    deadline = time.monotonic() + GIVE_UP_S
    while guarded_server.request("GET", "/healthz")[0] != 200:  # the server sees the closes in a moment
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert metric_value(guarded_server.metrics(), 'torchwork_connections_closed_total{reason="over_limit"}') >= 1


# ---------------------------------------------------------------- a client that disconnects mid-body
def test_a_client_that_disconnects_mid_body_is_one_info_line_and_no_500(guarded_server):
    before = guarded_server.metrics()
    for _ in range(5):
        sock = connect(guarded_server)
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n" + b'{"inputs": ["' + b"x" * 100)
        time.sleep(0.05)  # the handler is reading the body
        sock.close()
    deadline = time.monotonic() + GIVE_UP_S
    while metric_value(guarded_server.metrics(), "torchwork_client_disconnects_total") \
            < metric_value(before, "torchwork_client_disconnects_total") + 5:
        assert time.monotonic() < deadline, guarded_server.metrics()
        time.sleep(0.05)
    metrics = guarded_server.metrics()
    assert 'status="500"' not in metrics and 'status="400"' not in metrics
    log = guarded_server.stderr()
    assert log.count("disconnected before sending its whole request body") == 5
    assert "Traceback" not in log and "ERROR" not in log


# ---------------------------------------------------------------- one client's huge requests beside light ones
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--model-process", "--no-model-process"], ids=["process", "thread"])
def test_a_huge_request_runs_off_the_event_loop(models_dir, mode):
    """64 items x 10,000 characters take the model 3.2 s; meanwhile /healthz answers, and with a model process
    so does a light request (on the server's own copy of the model). Inline on the loop, both waited."""
    server = ServerProcess(models_dir, "slow_text_predictor", mode)
    try:
        for _ in range(5):  # the time of a light request, measured as the server serves
            assert server.predict(["a lovely film"])[0] == 200
        results = []
        big = threading.Thread(target=lambda: results.append(server.predict(["w " * 5000] * 64, timeout=60)))
        big.start()
        time.sleep(0.3)  # the big request has arrived and runs
        assert server.request("GET", "/healthz")[0] == 200
        health_while_running = big.is_alive()
        if mode == "--model-process":
            assert server.predict(["a lovely film"])[0] == 200
            light_while_running = big.is_alive()
        big.join()
        assert results[0][0] == 200 and len(results[0][2]["predictions"]) == 64
        assert health_while_running, "/healthz waited for the huge request"
        if mode == "--model-process":
            assert light_while_running, "a light request waited for the huge one"
    finally:
        server.stop()


# ---------------------------------------------------------------- the ready line; a run folder
def test_the_address_is_printed_only_once_requests_are_answered(models_dir):
    server = ServerProcess(models_dir, "text_predictor", wait=False)  # a model process: seconds to warm up
    try:
        status, _, answer = server.predict(["a lovely film"])  # at once, no /readyz polling
        assert status == 200, answer
        assert "warming up" in server.lines[0] and "listening" not in server.lines[0]
        assert "ready: listening on http://127.0.0.1:" in server.lines[-1]
    finally:
        server.stop()


def test_serving_a_run_folder_names_its_artifact_at_once(tmp_path):
    run = tmp_path / "20260101T000000Z-abcdef"
    (run / "checkpoints").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"command": {"argv": ["x.py"]}, "model": {}}))
    (run / "artifact").mkdir()
    (run / "artifact" / "manifest.json").write_text(json.dumps({"torchwork_artifact": 1}))
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "serve", str(run), "--port", "0"],
                          capture_output=True, text=True, timeout=60, env={"PYTHONPATH": str(SRC)})
    assert done.returncode == 2 and "warming up" not in done.stdout
    assert f"{run} is a training run folder, not an exported artifact" in done.stderr
    assert f"torchwork serve {run / 'artifact'}" in done.stderr


def test_a_run_folder_whose_manifest_is_a_fifo_is_named_without_reading_it(tmp_path):
    from torchwork.errors import ConfigError
    from torchwork.serve.server import check_not_a_run_folder

    run = tmp_path / "20260101T000000Z-abcdef"
    (run / "checkpoints").mkdir(parents=True)
    os.mkfifo(run / "manifest.json")  # reading it would block the serve command for ever
    (run / "artifact").mkdir()
    (run / "artifact" / "manifest.json").write_text(json.dumps({"torchwork_artifact": 1}))
    with pytest.raises(ConfigError, match="is a training run folder, not an exported artifact"):
        returns_within(10, lambda: check_not_a_run_folder(str(run)), run / "manifest.json")
    (run / "manifest.json").unlink()
    with (run / "manifest.json").open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: over the 16 MiB a manifest may be, refused unread
    with pytest.raises(ConfigError, match="is a training run folder, not an exported artifact"):
        check_not_a_run_folder(str(run))


@pytest.mark.parametrize("mode", ["--model-process", "--no-model-process"])
def test_a_model_that_cannot_answer_its_labels_refuses_to_start_in_one_line(models_dir, mode):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)])}
    result = subprocess.run([sys.executable, "-m", "torchwork.cli", "serve", str(models_dir), "--factory",
                             "serve_models:wrong_labels_predictor", "--port", "0", "--threads", "1", mode],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2, result.stderr
    assert "fails on a warm-up item" in result.stderr and "for 5 labels" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "ready" not in result.stdout
