"""Run the model in a child process, so that the server's Python and the model's do not share one GIL.

In one process the event loop (HTTP parsing, validation) and the batcher's worker take turns on the GIL.
An eager PyTorch model gives the GIL up and takes it back around every operator, and each take-back waits
while the loop holds it: measured here, a CNN's batched throughput fell from 1,815 to 338 images/s while
one pure-Python thread ran beside it, and stayed at 1,657/s when that work ran in another process. With
``--model-process`` the batcher's worker hands each batch to a child process over a pipe and waits off
the GIL; the child builds its own predictor and runs ``predict_batch``.

The child is started with ``spawn`` (no forked thread pools) and rebuilds the predictor by calling
``build(*args)``, which must be importable (a module-level function). It ignores SIGINT and SIGTERM: the
server finishes its in-flight batches and then closes the pipe, which ends the child; if the server dies,
the child sees the pipe close and exits too. A child that dies is started again on the next batch.

Example (not run here: it starts a process):
    process = ModelProcess(predictor_from_artifact, "runs/sentiment/.../artifact", threads=1)
    process.start()
    rows = process.predict_batch(["a tweet", "another"])
    process.close()
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.errors import ServeError

logger = logging.getLogger("torchwork.serve")


class ModelProcessError(ServeError):
    """The model process failed to start or died."""


class ModelProcess:
    """``predict_batch`` in a child process that builds its predictor with ``build(*args)``."""

    def __init__(self, build: Callable[..., Any], *args: Any, threads: int | None = None,
                 start_timeout_s: float = 300.0) -> None:
        self.build, self.args, self.threads = build, args, threads
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()  # one batch in the pipe at a time
        self._process: Any = None
        self._connection: Any = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the child and wait until its predictor is built (raise with the child's error if not)."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(target=_child_main, args=(child, self.build, self.args, self.threads),
                                        name="torchwork-model", daemon=True)
        self._process.start()
        child.close()
        self._connection = parent
        if not parent.poll(self.start_timeout_s):
            self._stop_child()
            raise ModelProcessError(f"the model process did not build its predictor within "
                                    f"{self.start_timeout_s:g} s")
        try:
            status, detail = self._receive()
        except EOFError:
            code = self._process.exitcode
            self._stop_child()
            raise ModelProcessError(f"the model process exited with code {code} while building its predictor "
                                    "(a crash in native code, or it was killed)") from None
        if status != "ready":
            self._stop_child()
            raise ModelProcessError(f"the model process could not build its predictor: {detail}")

    def predict_batch(self, items: Sequence[Any]) -> Any:
        """Rows for ``items``, computed in the child; raise ``RuntimeError`` with the child's error if the
        model failed on them (the batcher then retries each request alone)."""
        with self._lock:
            if self._closed:
                raise ModelProcessError("the model process is closed (the server is shutting down)")
            if self._process is None or not self._process.is_alive():
                if self._process is not None:
                    logger.error("the model process exited with code %s; starting a new one",
                                 self._process.exitcode)
                    self._stop_child()
                self._start()
            try:
                self._connection.send(items)  # a list, or one array (a fast pickle)
                status, detail = self._receive()
            except (OSError, EOFError) as error:
                code = self._process.exitcode if self._process is not None else None
                self._stop_child()
                raise ModelProcessError(f"the model process died while predicting (exit code {code}, "
                                        f"{type(error).__name__}); a new one starts with the next batch") from None
        if status == "error":
            raise RuntimeError(detail)
        return detail

    def _receive(self) -> tuple[str, Any]:
        try:
            return self._connection.recv()
        except EOFError:
            self._process.join(5)
            raise

    def close(self, timeout: float = 10.0) -> None:
        """End the child after the batch it is running (called once the batcher has stopped)."""
        with self._lock:
            self._closed = True
            self._stop_child(timeout)

    def _stop_child(self, timeout: float = 5.0) -> None:
        if self._connection is not None:
            try:
                self._connection.send(None)
            except OSError:
                pass
            self._connection.close()
            self._connection = None
        if self._process is not None:
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process = None


def _child_main(connection: Any, build: Callable[..., Any], args: tuple[Any, ...], threads: int | None) -> None:
    # The server owns shutdown: a Ctrl-C or SIGTERM to the process group must not kill a batch in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        from torchwork.serve.predictor import configure_threads

        configure_threads(threads)
        predictor = build(*args)
    except BaseException as error:  # tell the server why, then exit
        connection.send(("failed", f"{type(error).__name__}: {error}"))
        return
    connection.send(("ready", None))
    while True:
        try:
            items = connection.recv()
        except (EOFError, OSError):  # the server is gone
            return
        if items is None:
            return
        try:
            connection.send(("ok", predictor.predict_batch(items)))
        except Exception as error:
            connection.send(("error", f"{type(error).__name__}: {error}"))
