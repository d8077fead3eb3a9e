"""Serve an artifact in a real server process, ask it about a few texts, print the answers, stop it.

This is what ``torchwork quickstart --serve`` runs at the end:

1. start ``python -m torchwork.cli serve ARTIFACT --host 127.0.0.1 --port 0`` (a free loopback port, which
   the server prints once it listens);
2. wait for ``GET /readyz`` to answer 200 (bounded; if the server exits, its stderr says why);
3. ``POST /predict`` with ``{"inputs": [text, ...]}`` and print each text with its label and probabilities;
4. send SIGTERM, which lets in-flight requests finish, and wait for the process to exit.

The client side uses only the standard library (``http.client``), as any client of the service could.

Example (starts a real server, so not run here):
    from torchwork.recipes.serve_demo import serve_and_ask
    answers = serve_and_ask("runs/<run>/artifact", ["@united thank you, the crew was wonderful!"])
    answers[0]["label"], answers[0]["probabilities"]
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from torchwork.errors import ConfigError, ServeError

CHUNK = 32  # texts per request: well inside the server's default --max-items


class LocalServer:
    """A ``torchwork serve`` process on 127.0.0.1: ``request()`` it, ``stop()`` it (SIGTERM, then wait)."""

    def __init__(self, artifact_dir: str | os.PathLike[str], *, threads: int | None = None,
                 extra_args: Sequence[str] = (), timeout_s: float = 120.0) -> None:
        artifact = Path(artifact_dir)
        if not artifact.is_dir():
            raise ConfigError(f"{artifact} is not a directory; pass the artifact folder that "
                              "torchwork.deploy.export wrote (summary.json's 'artifact').")
        command = [sys.executable, "-m", "torchwork.cli", "serve", str(artifact), "--host", "127.0.0.1",
                   "--port", "0", *(["--threads", str(threads)] if threads else []), *extra_args]
        # The child imports the same torchwork as this process, installed or not.
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in [package_root, os.environ.get("PYTHONPATH", "")] if p)}
        # Files, not pipes: a chatty server can never block on a full pipe nobody reads.
        self._stdout: IO[bytes] = tempfile.TemporaryFile()
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._stdout,
                                        stderr=self._stderr, env=env)
        self.port = 0
        try:
            self.port = self._wait_for_port(time.monotonic() + timeout_s, timeout_s)
            self._wait_ready(time.monotonic() + timeout_s, timeout_s)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        """What the server wrote to stderr so far (its logs and errors)."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _died(self, doing: str) -> ServeError:
        tail = self.output().strip()[-4000:] or "(nothing on stderr)"
        return ServeError(f"the server exited with code {self.process.returncode} while {doing}. Its stderr:\n"
                          f"{tail}")

    def _wait_for_port(self, deadline: float, timeout_s: float) -> int:
        marker = b"listening on http://127.0.0.1:"
        while time.monotonic() < deadline:
            self._stdout.seek(0)
            text = self._stdout.read()
            if marker in text:
                return int(text.split(marker, 1)[1].split()[0].decode())
            if self.process.poll() is not None:
                raise self._died("starting")
            time.sleep(0.05)
        raise ServeError(f"the server did not start listening within {timeout_s:g} s. Its stderr:\n"
                         f"{self.output()[-4000:]}")

    def _wait_ready(self, deadline: float, timeout_s: float) -> None:
        while time.monotonic() < deadline:
            try:
                if self.request("GET", "/readyz", timeout=2.0)[0] == 200:
                    return
            except OSError:
                pass  # not accepting yet
            if self.process.poll() is not None:
                raise self._died("loading the model")
            time.sleep(0.05)
        raise ServeError(f"the server at {self.url} was not ready (GET /readyz) within {timeout_s:g} s. Its "
                         f"stderr:\n{self.output()[-4000:]}")

    def request(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> tuple[int, Any]:
        """One request (a body is sent as JSON); returns the status and the parsed JSON answer."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw.decode(errors="replace")

    def predict(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        """``POST /predict`` in chunks of ``CHUNK`` items; the predictions in order."""
        predictions: list[dict[str, Any]] = []
        for start in range(0, len(items), CHUNK):
            status, answer = self.request("POST", "/predict", {"inputs": list(items[start:start + CHUNK])})
            if status != 200:
                detail = answer.get("detail") if isinstance(answer, dict) else answer
                raise ServeError(f"POST {self.url}/predict answered {status}: {detail}")
            predictions.extend(answer["predictions"])
        return predictions

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (in-flight requests finish), wait up to ``timeout_s``, then kill; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for handle in (self._stdout, self._stderr):
            if not handle.closed:
                handle.close()
        return self.process.returncode


@contextlib.contextmanager
def local_server(artifact_dir: str | os.PathLike[str], **kwargs: Any) -> Iterator[LocalServer]:
    """A ready :class:`LocalServer` for the ``with`` block, stopped (SIGTERM) when it ends."""
    server = LocalServer(artifact_dir, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def serve_and_ask(artifact_dir: str | os.PathLike[str], texts: Sequence[str], *, threads: int | None = None,
                  timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Serve ``artifact_dir``, ask it about ``texts``, print the answers, stop the server.

    Returns one dict per text: ``{"text", "label", "probabilities"}`` for a classifier (``{"text",
    "output"}`` otherwise). Raises :class:`~torchwork.errors.ServeError`, with the server's stderr, if it
    does not start, become ready within ``timeout_s`` or answer 200.
    """
    texts = list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ConfigError("serve_and_ask needs a non-empty list of texts (strings) to send to the server.")
    with local_server(artifact_dir, threads=threads, timeout_s=timeout_s) as server:
        print(f"serving {artifact_dir} at {server.url}; POST /predict with {len(texts)} text(s):", flush=True)
        answers = [{"text": text, **prediction} for text, prediction in zip(texts, server.predict(texts))]
    for answer in answers:
        print(format_answer(answer))
    return answers


def format_answer(answer: dict[str, Any], width: int = 60) -> str:
    """One line: the label, every probability, the text (cut to ``width`` characters)."""
    text = answer["text"] if len(answer["text"]) <= width else answer["text"][: width - 3] + "..."
    if "label" not in answer:
        return f"  {json.dumps(answer.get('output'))[:40]:<40}  {text!r}"
    probabilities = " ".join(f"{k} {v:.3f}" for k, v in answer["probabilities"].items())
    return f"  {answer['label']:<10} ({probabilities})  {text!r}"


def serve_command(artifact: str | os.PathLike[str]) -> str:
    """The command line that serves ``artifact``, quoted for a shell (a run_dir with a space broke the pasted
    line: ``torchwork serve my runs/...`` read two artifacts).

    Example:
        >>> serve_command("my runs/fit/artifact")
        "torchwork serve 'my runs/fit/artifact'"
    """
    import shlex

    return f"torchwork serve {shlex.quote(str(artifact))}"
