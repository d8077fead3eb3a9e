"""Real server processes for the serving tests: ``torchwork serve`` in a subprocess on a free loopback port.

tests/serve/conftest.py registers the fixtures, so each test process builds one model folder and starts one
server of each kind.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


class ServerProcess:
    """``python -m torchwork.cli serve FOLDER [--factory serve_models:FACTORY] --port 0 ...`` in a subprocess.

    Without a factory it serves FOLDER as an exported artifact (a list: each NAME=ARTIFACT); its log goes to ``log_dir`` (default FOLDER).
    ``env``: more environment variables; ``key``: sent as ``Authorization: Bearer KEY`` by :meth:`request`;
    ``tls``: an SSL context for an HTTPS server (``--ssl-certfile``).
    """

    def __init__(self, folder: Path | list[str], factory: str | None, *flags: str, log_dir: Path | None = None,
                 wait: bool = True, env: dict[str, str] | None = None, key: str | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.log = (log_dir or folder) / f"{factory or 'artifact'}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.key, self.tls = key, tls
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)]), **(env or {})}
        folders = [str(f) for f in folder] if isinstance(folder, (list, tuple)) else [str(folder)]  # NAME=ARTIFACT...
        command = [sys.executable, "-m", "torchwork.cli", "serve", *folders,
                   *(["--factory", f"serve_models:{factory}"] if factory else []), "--port", "0",
                   "--threads", "1", *flags]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env)
        self.lines: list[str] = []  # "... warming up ...", then "... ready: listening on http://127.0.0.1:PORT ..."
        while not self.lines or "listening on http" not in self.lines[-1]:
            self.lines.append(self.process.stdout.readline().decode())
            if not self.lines[-1]:
                self.process.kill()
                raise RuntimeError(f"server did not start: {self.lines!r}\n{self.stderr()}")
        self.port = int(re.search(r"listening on https?://\S+:(\d+)", self.lines[-1]).group(1))
        if wait:
            self.wait_ready()

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/readyz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.stderr()}")
            time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout} s:\n{self.stderr()}")

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.tls)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | Any = None, headers: dict[str, str] | None = None,
                timeout: float = 30.0, connection: http.client.HTTPConnection | None = None
                ) -> tuple[int, dict[str, str], Any]:
        """One request; a body that is not bytes is sent as JSON. Returns status, headers, parsed JSON or text."""
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
        own = connection is None
        conn = connection or self.connection(timeout)
        try:
            auth = {"Authorization": f"Bearer {self.key}"} if self.key else {}
            conn.request(method, path, body=body,
                         headers={"Content-Type": "application/json", **auth, **(headers or {})})
            response = conn.getresponse()
            raw = response.read()
        finally:
            if own:
                conn.close()
        try:
            payload: Any = json.loads(raw)
        except ValueError:
            payload = raw.decode(errors="replace")
        return response.status, {k.lower(): v for k, v in response.getheaders()}, payload

    def predict(self, inputs: list[Any], **kwargs: Any) -> tuple[int, dict[str, str], Any]:
        return self.request("POST", "/predict", {"inputs": inputs}, **kwargs)

    def metrics(self) -> str:
        return self.request("GET", "/metrics")[2]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        return self.process.returncode


def parallel(function: Callable[[Any], Any], arguments: Iterable[Any], workers: int = 16) -> list[Any]:
    """``function`` over ``arguments`` from ``workers`` threads at once: concurrent clients."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(function, arguments))


def probabilities(prediction: dict[str, Any], labels: list[str]) -> np.ndarray:
    """A classifier's prediction as a row of probabilities, after checking its form and its label."""
    assert set(prediction) == {"label", "probabilities"} and list(prediction["probabilities"]) == labels
    row = np.array([prediction["probabilities"][label] for label in labels])
    assert prediction["label"] == labels[int(row.argmax())]
    return row


def metric_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") and line.split(" ")[0] == name:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics:\n{text}")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The models of serve_models.py, built once for all the run's workers."""
    from serve_models import build_models
    from shared_builds import built_once

    return built_once("serve-models", build_models)


def _server(folder: Path, factory: str, *flags: str) -> Iterator[ServerProcess]:
    server = ServerProcess(folder, factory, *flags)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def text_server(models_dir: Path) -> Iterator[ServerProcess]:
    yield from _server(models_dir, "text_predictor", "--max-batch-size", "16", "--max-items", "8",
                       "--max-text-length", "200", "--docs")


@pytest.fixture(scope="session")
def digits_server(models_dir: Path) -> Iterator[ServerProcess]:
    """Batches on a thread of the server (``--no-model-process``); the text server uses a model process."""
    yield from _server(models_dir, "digits_onnx_predictor", "--max-batch-size", "16", "--max-items", "8",
                       "--max-body-bytes", "20000", "--no-model-process", "--docs")


def _slow_server(models_dir: Path, mode: str) -> Iterator[ServerProcess]:
    yield from _server(models_dir, "slow_predictor", "--max-batch-size", "4", "--max-queue", "8",
                       "--timeout-s", "3", mode)


SERVER_MODES = {"params": ["--model-process", "--no-model-process"], "ids": ["process", "thread"]}


@pytest.fixture(scope="module", **SERVER_MODES)
def slow_server(models_dir: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """Sleeps item[0] seconds per batch (the largest in the batch); 4 items a batch, 8 queued, 3 s timeout;
    batches in a model process, then on a thread."""
    yield from _slow_server(models_dir, request.param)


@pytest.fixture(**SERVER_MODES)
def own_slow_server(models_dir: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """A slow server of the test's own, for a test that stops it (the module's is shared by its tests)."""
    yield from _slow_server(models_dir, request.param)
