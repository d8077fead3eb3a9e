"""Run the model in a child process, so that the server's Python and the model's do not share one GIL.

In one process the event loop (HTTP parsing, validation) and the batcher's worker take turns on the GIL.
An eager PyTorch model gives the GIL up and takes it back around every operator, and each take-back waits
while the loop holds it: measured here, a CNN's batched throughput fell from 1,815 to 338 images/s while
one pure-Python thread ran beside it, and stayed at 1,657/s when that work ran in another process. With
``--model-process`` the child builds its own predictor, runs each batch and encodes its answers; the
server's event loop sends batches and reads answers over a socket itself
(:class:`~torchwork.serve.process_batcher.ProcessBatcher`), with no thread of its own to wake.

Messages are pickles behind an 8-byte length, between this process and the child it spawned (nobody else
holds the socket). The child is started with ``spawn`` (no forked thread pools) and rebuilds the predictor
by calling ``build(*args)``, which must be importable (a module-level function). It ignores SIGINT and
SIGTERM: the server finishes its in-flight batches and then closes the socket, which ends the child; if the
server dies, the child sees the socket close and exits too, even while it is still building its predictor.
A server that fails or is interrupted ends its children on every path, and at the latest when it exits
(before ``multiprocessing``'s own exit handler, which would send the SIGTERM they ignore and wait forever).

Example (not run here: it starts a process):
    process = ModelProcess(predictor_from_artifact, "runs/sentiment/.../artifact", threads=1)
    process.start()
    rows = process.predict_batch(["a tweet", "another"])
    process.close()
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import pickle
import select
import signal
import socket
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.deploy.runtime import check_row_count
from torchwork.errors import ConfigError, ModelProcessError
from torchwork.finite import is_count, is_finite_number
from torchwork.quoting import quote_value
from torchwork.serve.config import DAY_S
from torchwork.threads import check_threads
from torchwork.whole_lines import keep_lines_whole

logger = logging.getLogger("torchwork.serve")

_LENGTH = struct.Struct("!Q")


__all__ = ["ModelProcess", "ModelProcessError"]  # ModelProcessError lives in torchwork.errors; kept here too


class ModelProcess:
    """A child process that builds its predictor with ``build(*args)`` and runs batches for the server.

    ``nice``: how much lower the child's CPU priority is than the server's (``os.nice``, 0 to 19). When
    the cores are oversubscribed the event loop, which reads requests and forms the batches, then runs
    first, and the model takes the rest; a loop that must wait leaves the model with smaller batches and
    clients waiting. Nice only orders processes that compete for a core: a model alone on its cores runs
    at full speed. Measured here with the quickstart's text model at concurrency 64 (2 vCPUs shared with
    the load generator, three A/B pairs): 4,170-4,410 req/s at nice 0, 4,730-5,040 at nice 10.

    Blocking use (tools, tests): :meth:`start`, :meth:`predict_batch`, :meth:`close`. The server instead
    connects the socket to its event loop (:meth:`connect`) and sends batches there (:meth:`send`); answers
    come back to a callback.
    """

    def __init__(self, build: Callable[..., Any], *args: Any, threads: int | str | None = None, nice: int = 10,
                 start_timeout_s: float = 300.0, name: str = "model",
                 say: Callable[[str], Any] | None = None) -> None:
        if not is_count(nice, 0, 19):
            raise ConfigError(f"nice={quote_value(nice)}: the model process's niceness must be 0 (same CPU priority "
                              "as the server) to 19 (lowest)")
        # 'auto' and 0 choose for the machine, as everywhere in torchwork (0 was refused here alone); a count
        # no more than this machine can run (10**5000 was taken, for the child to try)
        threads = check_threads(threads, "threads")
        if not (is_finite_number(start_timeout_s) and 0 < start_timeout_s <= DAY_S):
            raise ConfigError(f"start_timeout_s={quote_value(start_timeout_s)}: how long the model may take to load, "
                              "more than 0 seconds and at most a day")
        self.build, self.args, self.threads, self.nice, self.name = build, args, threads, nice, name
        self.say = say if say is not None else _print
        self.threads_chosen: int | None = None  # what the child runs with, and why (it says so when it starts)
        self.threads_reason: str | None = None
        self.probe_rows: Any = None  # the model's rows for one warm-up item, for a server that holds no model
        self.start_timeout_s = start_timeout_s
        self.warm_up: tuple[int, ...] = ()  # batch sizes the child runs once before it says ready
        self._lock = threading.Lock()  # blocking use: one batch on the socket at a time
        self._process: Any = None
        self._socket: socket.socket | None = None
        self._transport: asyncio.Transport | None = None
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, warm_up: Sequence[int] = ()) -> None:
        """Start the child and wait until its predictor is built and has run a batch of each ``warm_up``
        size (raise with the child's error if not)."""
        self.warm_up = tuple(warm_up)
        with self._lock:
            self._start()

    def restart(self) -> None:
        """Replace a child that died (blocking: run it off the event loop)."""
        with self._lock:
            self._replace_child()

    def _replace_child(self) -> None:
        if self._process is not None:
            self._process.join(5)
            logger.error("the model process exited with code %s; starting a new one", self._process.exitcode)
        self._stop_child()
        self._start()

    def _start(self) -> None:
        import multiprocessing

        if self._closed:
            raise ModelProcessError("the model process is closed (the server is shutting down)")
        context = multiprocessing.get_context("spawn")
        _end_at_exit(self)
        ours, theirs = socket.socketpair()
        self._process = context.Process(target=_child_main, name="torchwork-model", daemon=True,
                                        args=(theirs, self.build, self.args, self.threads, self.warm_up,
                                              self.nice))
        self._socket = ours
        try:
            self._process.start()
        except BaseException:
            self._process = None
            self._stop_child()
            raise
        finally:
            theirs.close()
        ours.settimeout(self.start_timeout_s)
        try:
            status, detail = _receive(ours)
        except TimeoutError:
            self._stop_child()
            raise ModelProcessError(f"the model process did not build its predictor within "
                                    f"{self.start_timeout_s:g} s") from None
        except EOFError:
            self._process.join(5)
            code = self._process.exitcode
            self._stop_child()
            raise ModelProcessError(f"the model process exited with code {code} while building its predictor "
                                    "(a crash in native code, or it was killed)") from None
        except BaseException:  # Ctrl-C (or any other error) while it builds: the child must not outlive this
            self._stop_child()
            raise
        ours.settimeout(None)
        if status != "ready":
            self._stop_child()
            raise ModelProcessError(f"the model process could not build its predictor: {detail}")
        self.threads_chosen, self.threads_reason, self.probe_rows = detail
        self.say(f"torchwork serve: model {self.name}: the model process (pid {self._process.pid}) runs "
                 f"{self.threads_chosen} thread(s) ({self.threads_reason})")

    def predict_batch(self, items: Sequence[Any]) -> Any:
        """Rows for ``items``, computed in the child (blocking); raise :class:`ModelProcessError` with the child's error
        if the model failed on them. A child that died is started again first."""
        with self._lock:
            if self._closed:
                raise ModelProcessError("the model process is closed (the server is shutting down)")
            if self._transport is not None:
                raise ModelProcessError("the model process is connected to an event loop: send() batches there")
            if self._process is None or not self._process.is_alive():
                self._replace_child()
            assert self._socket is not None and self._process is not None  # a live child is connected
            try:
                _send(self._socket, ("rows", items, None))
                status, detail = _receive(self._socket)
            except (OSError, EOFError) as error:
                self._process.join(5)
                code = self._process.exitcode
                self._stop_child()
                raise ModelProcessError(f"the model process died while predicting (exit code {code}, "
                                        f"{type(error).__name__}); a new one starts with the next batch") from None
        if status == "error":
            raise ModelProcessError(f"the model failed in the model process: {detail}. Check the input or the model.")
        return detail

    # ------------------------------------------------------------------ on the server's event loop
    async def connect(self, on_answer: Callable[[tuple[str, Any]], None], on_lost: Callable[[], None]) -> None:
        """Read the child's answers on the running loop: ``on_answer(("ok", fragments) | ("error", text))``
        for each batch sent, ``on_lost()`` if the child dies (its socket closes)."""
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_connection(lambda: _Channel(on_answer, on_lost), sock=self._socket)

    def send(self, items: Any, chunk: int) -> None:
        """Queue a batch for the child (on the loop; never blocks): it runs ``items`` in chunks of ``chunk``
        and answers with one JSON fragment per item (:mod:`torchwork.serve.encoding`)."""
        if self._transport is None:
            raise ModelProcessError("the model process is not connected to an event loop: await connect() first "
                                    "(or use predict_batch() without one)")
        self._transport.write(_frame(("fragments", items, chunk)))

    def disconnect(self) -> None:
        """Close the socket on the loop: the child finishes its batch, sees it closed, and exits."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def close(self, timeout: float = 10.0) -> None:
        """End the child after the batch it is running (called once the batcher has stopped)."""
        with self._lock:
            self._closed = True
            self._stop_child(timeout)

    def _stop_child(self, timeout: float = 5.0) -> None:
        self._transport = None
        if self._socket is not None:
            try:
                self._socket.close()
            except OSError:
                pass
            self._socket = None
        if self._process is not None:
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process = None


_LIVE: weakref.WeakSet[ModelProcess] = weakref.WeakSet()  # every ModelProcess that has started a child


def _end_at_exit(process: ModelProcess) -> None:
    """Have the interpreter's exit end ``process``'s child, if it is still there then: a path that forgot to
    close it must not leave the exit waiting forever on a child that ignores SIGTERM."""
    if not _LIVE:
        import multiprocessing.util  # noqa: F401 - its exit handler is registered on import: ours must come later

        atexit.unregister(_end_children)
        atexit.register(_end_children)  # atexit runs the last registered first
    _LIVE.add(process)


def _end_children() -> None:
    for process in list(_LIVE):
        process._closed = True
        process._stop_child(timeout=5.0)


class _Channel(asyncio.Protocol):
    """The server's end of the socket: length-prefixed pickles in, one callback per message."""

    def __init__(self, on_answer: Callable[[tuple[str, Any]], None], on_lost: Callable[[], None]) -> None:
        self.on_answer, self.on_lost = on_answer, on_lost
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= _LENGTH.size:
            end = _LENGTH.size + _LENGTH.unpack_from(self.buffer)[0]
            if len(self.buffer) < end:
                return
            message = pickle.loads(self.buffer[_LENGTH.size:end])  # from our own child, never a client
            del self.buffer[:end]
            self.on_answer(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_lost()


def _frame(message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def _send(sock: socket.socket, message: Any) -> None:
    sock.sendall(_frame(message))


def _receive(sock: socket.socket) -> Any:
    (size,) = _LENGTH.unpack(_read_exactly(sock, _LENGTH.size))
    return pickle.loads(_read_exactly(sock, size))


def _read_exactly(sock: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        count = sock.recv_into(view[got:])
        if count == 0:
            raise EOFError("the other end closed the socket")
        got += count
    return data


def _child_main(sock: socket.socket, build: Callable[..., Any], args: tuple[Any, ...], threads: int | None,
                warm_up: tuple[int, ...], nice: int) -> None:
    # The server owns shutdown: a Ctrl-C or SIGTERM to the process group must not kill a batch in flight.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):  # the server's: it reloads keys (and models); its default would end the child
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if nice and hasattr(os, "nice"):  # POSIX only
        os.nice(nice)
    keep_lines_whole(sys.stdout, sys.stderr)  # the server's log is this process's too
    built = threading.Event()
    threading.Thread(target=_exit_if_abandoned, args=(sock, built), name="torchwork-server-watch",
                     daemon=True).start()
    try:
        from torchwork.serve.encoding import prediction_fragments
        from torchwork.serve.heap import settle_heap
        from torchwork.serve.predictor import configure_threads

        choice = model_threads(threads)
        configure_threads(choice.threads)  # before the model is built: ONNX Runtime fixes its threads then
        predictor = build(*args)
        fragments = prediction_fragments(predictor.labels)
        examples = getattr(predictor, "example_items", None)
        probe = None
        if callable(examples):
            for size in warm_up:
                fragments(predictor.predict_batch(examples(size)))
            probe = predictor.predict_batch(examples(1))
    except BaseException as error:  # tell the server why, then exit
        built.set()
        with contextlib.suppress(OSError):  # (unless it is gone)
            _send(sock, ("failed", f"{type(error).__name__}: {error}"))
        return
    built.set()  # before "ready": from then on the server sends batches, and the watch must not read them
    settle_heap()  # as the server does
    import torch

    try:
        _send(sock, ("ready", (torch.get_num_threads(), choice.reason, probe)))
    except OSError:  # the server gave up meanwhile
        return
    while True:
        try:
            message = _receive(sock)
        except (EOFError, OSError):  # the server is gone, or closed the socket
            return
        if message is None:
            return
        kind, items, chunk = message
        try:
            rows = _predict_in_chunks(predictor, items, chunk)
            answer = ("ok", fragments(rows) if kind == "fragments" else rows)
        except Exception as error:
            answer = ("error", f"{type(error).__name__}: {error}")
        try:
            _send(sock, answer)
        except OSError:  # the server is gone
            return


def _exit_if_abandoned(sock: socket.socket, built: threading.Event) -> None:
    """While the predictor builds and warms up (the server sends nothing until it is ready), end this
    process as soon as the server's end of the socket closes: the server gave up (Ctrl-C, a failed start) or
    died, and a model that went on building would outlive it for as long as that takes."""
    while not built.is_set():
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable and not built.is_set():
            try:
                gone = sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                os._exit(1)


def model_threads(threads: int | None = None) -> Any:
    """The model process's compute threads (a :class:`~torchwork.threads.ThreadChoice`): ``threads`` when
    given, else chosen for the machine as it is: the CPUs this process may use (affinity, cgroup quota) less
    those other processes use now, and one left to the server's event loop, at least 1.

    Not measured by timing steps, as the Trainer does: ONNX Runtime fixes its thread count when the model is
    built, so trying another count would mean building the model again.

    Example:
        >>> model_threads(3).threads, model_threads(3).reason
        (3, 'threads=3 as asked')
        >>> from torchwork.threads import usable_cpus
        >>> 1 <= model_threads().threads <= usable_cpus()
        True
    """
    from torchwork.threads import ThreadChoice, free_cpus, recent_busy_cpus, usable_cpus

    usable = usable_cpus()
    if threads is not None:
        return ThreadChoice(threads, f"threads={threads} as asked", usable)
    busy = recent_busy_cpus()
    free = free_cpus(usable, busy)
    count = max(1, min(free, usable - 1))
    reason = f"auto: {usable} usable CPU{'s' if usable != 1 else ''}, others use {busy:.1f} now"
    if count < free:
        reason += ", one left to the server's event loop"
    return ThreadChoice(count, reason, usable, busy)


def _print(line: str) -> None:
    print(line, flush=True)


def _predict_in_chunks(predictor: Any, items: Any, chunk: int | None) -> Any:
    if chunk is None or len(items) <= chunk:
        rows = predictor.predict_batch(items)
        check_row_count(rows, len(items))
        return rows
    out: list[Any] = []
    for start in range(0, len(items), chunk):
        out.extend(_predict_in_chunks(predictor, items[start:start + chunk], None))
    return out
