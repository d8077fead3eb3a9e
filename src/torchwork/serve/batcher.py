"""Dynamic batching: requests queue up, one worker thread runs them together, off the event loop.

This is the in-process batcher (``torchwork serve --no-model-process``, and ``serve()`` in Python); with a
model process, :class:`~torchwork.serve.process_batcher.ProcessBatcher` forms the batches the same way on
the event loop itself.

The batcher is opportunistic: when the worker is free it takes everything queued (up to
``max_batch_size`` items) and runs it at once, so at low load nobody pays a wait, and under load the queue
fills while the model runs and batches grow by themselves. It waits for more items (never longer than
``max_wait_s``) only when waiting pays: requests arrived while the previous batch was running, so more are
arriving concurrently, and it stops waiting as soon as they stop coming.

Requests are handed to the worker once per event-loop pass, after every handler that was ready has
submitted. A request that is alone in its pass, with the worker idle, runs right there on the event loop
when it is cheap: its cost (``cost(items)``, in units of a short item: the item count, plus the characters
for text) times the measured time of one unit is under ``inline_below_s`` (20 ms by default). Nobody else
is waiting, so it pays no thread hand-off and answers as fast as a per-request server would. At
concurrency 1 on a 2-vCPU VM the hand-off cost 1.4x a naive server's latency for a 0.1 ms text model and
1.6 ms on a 6 ms CNN (1.24x): waking the worker on the other, idle vCPU is slow. Anything dearer (a slow
model, or 64 items of 10,000 characters) runs on the worker, so that the event loop keeps answering
health checks and accepting requests: run inline, one such request held ``/healthz`` at 201 ms.

If a batch fails, each request in it is run alone, so one bad request never fails the others. Results go
back to the event loop with one ``call_soon_threadsafe`` per batch.

Example:
    >>> import asyncio
    >>> from torchwork.serve.batcher import Batcher
    >>> batcher = Batcher(lambda items: [2 * x for x in items], lambda rows: (200, repr(rows).encode()),
    ...                   max_batch_size=8)
    >>> async def main():
    ...     batcher.start(asyncio.get_running_loop())
    ...     answers = await asyncio.gather(*(batcher.submit([i, i + 1]) for i in range(3)))
    ...     batcher.stop()
    ...     return answers
    >>> asyncio.run(main())
    [(200, b'[0, 2]'), (200, b'[2, 4]'), (200, b'[4, 6]')]
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from torchwork.errors import QueueFullError
from torchwork.serve.encoding import Answer
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.schemas import error_body

logger = logging.getLogger("torchwork.serve")


class Job:
    """One queued request: await it for its answer; ``cancel()`` it if nobody will wait any longer."""

    __slots__ = ("items", "future", "cancelled", "answer")

    def __init__(self, items: Sequence[Any], future: asyncio.Future[Answer]) -> None:
        self.items = items
        self.future = future
        self.cancelled = False
        self.answer: Answer | None = None

    def __await__(self) -> Generator[Any, None, Answer]:
        return self.future.__await__()

    def cancel(self) -> None:
        """If the worker has not taken this request yet, it never runs."""
        self.cancelled = True


class Batcher:
    """Queue requests (lists of items) and run them in batches on one worker thread.

    ``run(items) -> rows`` is the model (one row per item, in order) and ``encode(rows) -> (status, body)``
    turns one request's rows into its answer; both run on the worker thread (a lone request of a fast
    model: on the event loop).
    """

    def __init__(self, run: Callable[[list[Any]], Sequence[Any]], encode: Callable[[Sequence[Any]], Answer],
                 *, max_batch_size: int = 32, max_wait_s: float = 0.002, max_queue: int = 1024,
                 metrics: ServerMetrics | None = None, inline_below_s: float = 0.02,
                 cost: Callable[[Sequence[Any]], float] = len) -> None:
        self._run, self._encode = run, encode
        self.inline_below_s = inline_below_s
        self._cost = cost
        self._unit_seconds = math.inf  # smoothed time per unit of cost of a lone item (unknown until measured)
        self.max_batch_size, self.max_wait_s, self.max_queue = max_batch_size, max_wait_s, max_queue
        self.metrics = metrics
        # A SimpleQueue hands a job over with one C-level lock; each counter below has a single writer
        # thread (submitted/last_arrival/gap: the event loop; taken: the worker), so no lock is needed.
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._submitted = 0  # items ever queued
        self._taken = 0  # items ever taken off the queue by the worker
        self._last_arrival = 0.0
        self._gap = 0.0  # smoothed time between arrivals
        self._stopping = False
        self._pending: list[Job] = []  # submitted during this event-loop pass, not handed over yet
        self._flush_scheduled = False
        self._model_lock = threading.Lock()  # the model runs on one thread at a time
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def queued_items(self) -> int:
        """Items waiting for the model."""
        return self._submitted - self._taken

    async def open(self) -> None:
        """Start the worker, answering on the running loop."""
        self.start(asyncio.get_running_loop())

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the worker; answers are delivered on ``loop``."""
        self._loop = loop
        self._thread = threading.Thread(target=self._work, name="torchwork-batcher", daemon=True)
        self._thread.start()

    def submit(self, items: Sequence[Any]) -> Job:
        """Queue one request (called on the event loop); raise :class:`~torchwork.errors.QueueFullError` when
        ``max_queue`` items wait already (the server answers 503)."""
        assert self._loop is not None, "start() the batcher first"
        if self._stopping:
            raise QueueFullError("the server is shutting down; retry on another instance or later")
        queued = self._submitted - self._taken
        if queued and queued + len(items) > self.max_queue:
            raise QueueFullError(f"the queue holds {queued} items (--max-queue {self.max_queue}); retry later")
        job = Job(items, self._loop.create_future())
        now = time.monotonic()
        self._gap = 0.8 * self._gap + 0.2 * min(now - self._last_arrival, 1.0)
        self._last_arrival = now
        self._submitted += len(items)
        self._pending.append(job)
        if not self._flush_scheduled:  # after the handlers that are ready in this pass have submitted
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return job

    def _flush(self) -> None:
        """On the event loop: run a lone request inline if the model is idle, else hand everything over."""
        self._flush_scheduled = False
        jobs, self._pending = self._pending, []
        if len(jobs) == 1 and not self._stopping and self.estimate(jobs[0].items) < self.inline_below_s \
                and self._idle():
            try:
                self._taken += len(jobs[0].items)
                if not jobs[0].cancelled:
                    self._execute(jobs)
            finally:
                self._model_lock.release()
            _deliver(jobs)
            return
        self._hand_over(jobs)

    def estimate(self, items: Sequence[Any]) -> float:
        """Seconds the model would take for ``items`` alone (infinite until one lone item was timed)."""
        return self._unit_seconds * self._cost(items)

    def _idle(self) -> bool:
        """Nothing queued and the model free; if so, hold the model lock (released by the caller)."""
        return self._queue.empty() and self._model_lock.acquire(False)

    def _hand_over(self, jobs: list[Job]) -> None:
        for job in jobs:
            self._queue.put(job)

    async def shutdown(self, timeout: float = 30.0) -> None:
        """On the event loop: :meth:`stop` without blocking it."""
        await asyncio.get_running_loop().run_in_executor(None, self.stop, timeout)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Refuse new requests, finish everything queued, then end the worker thread."""
        if not self._stopping:
            self._stopping = True
            for job in self._pending:  # submitted but not handed over yet: they still run
                self._queue.put(job)
            self._pending = []
            self._queue.put(None)  # behind every queued job
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker thread
    def _work(self) -> None:
        held: Job | None = None  # taken off the queue but did not fit in the last batch
        arrivals_while_running = 0
        stop = False
        while not stop:
            first = held if held is not None else self._queue.get()
            held = None
            if first is None:
                return
            jobs, size = [first], len(first.items)
            while size < self.max_batch_size:  # everything already queued, as far as it fits
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                if size + len(job.items) > self.max_batch_size:
                    held = job
                    break
                jobs.append(job)
                size += len(job.items)
            if arrivals_while_running and not stop and held is None and self.max_wait_s > 0:
                size, held, stop = self._wait_for_more(jobs, size)
            self._taken += size
            arrivals_before = self._submitted
            jobs = [job for job in jobs if not job.cancelled]
            if not jobs:
                continue
            with self._model_lock:
                self._execute(jobs)
            # Counted before the answers go out: a client that gets its answer and sends again at once
            # (concurrency 1) must not look like concurrent load.
            arrivals_while_running = self._submitted - arrivals_before
            try:
                self._loop.call_soon_threadsafe(_deliver, jobs)  # type: ignore[union-attr]
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _wait_for_more(self, jobs: list[Job], size: int) -> tuple[int, Job | None, bool]:
        """Requests are arriving concurrently: collect more until they stop, the batch is full, or max-wait.

        Returns the new size, a job that did not fit (or None), and whether the stop marker was seen.
        """
        deadline = time.monotonic() + self.max_wait_s
        # "Stopped coming": nothing new for a few typical gaps between arrivals.
        patience = min(max(3 * self._gap, 0.0002), self.max_wait_s)
        while size < self.max_batch_size:
            now = time.monotonic()
            until = min(deadline, max(self._last_arrival, now) + patience)
            if until <= now:
                break
            try:
                job = self._queue.get(timeout=until - now)
            except queue.Empty:
                break
            if job is None:
                return size, None, True
            if size + len(job.items) > self.max_batch_size:
                return size, job, False
            jobs.append(job)
            size += len(job.items)
        return size, None, False

    def _execute(self, jobs: list[Job]) -> None:
        """Run the jobs' items together (in chunks of max_batch_size) and set each job's answer."""
        started = time.perf_counter()
        items = [item for job in jobs for item in job.items]
        try:
            rows: list[Any] = []
            for start in range(0, len(items), self.max_batch_size):
                chunk = items[start:start + self.max_batch_size]
                out = self._run(chunk)
                if len(out) != len(chunk):
                    raise RuntimeError(f"the model returned {len(out)} rows for {len(chunk)} items")
                rows.extend(out[i] for i in range(len(chunk)))
                if self.metrics is not None:
                    self.metrics.batch_size.observe(len(chunk))
        except Exception as error:
            if len(jobs) > 1:  # find the request that fails; the others still get their answers
                for job in jobs:
                    self._execute([job])
                return
            logger.exception("the model failed on a request")
            jobs[0].answer = (500, error_body(f"the model failed on this request: {type(error).__name__}: "
                                              f"{error}. The server keeps serving; check the input or the model."))
            return
        start = 0
        for job in jobs:
            job.answer = self._encode_safely(rows[start:start + len(job.items)])
            start += len(job.items)
        elapsed = time.perf_counter() - started
        if len(items) == 1:
            self._time_lone(elapsed, items)
        if self.metrics is not None:
            self.metrics.batch_seconds.observe(elapsed)

    def _time_lone(self, elapsed: float, items: Sequence[Any]) -> None:
        """Smooth the time per unit of cost one lone item took (what decides whether requests run inline)."""
        unit = elapsed / max(self._cost(items), 1e-9)
        self._unit_seconds = unit if math.isinf(self._unit_seconds) else 0.7 * self._unit_seconds + 0.3 * unit

    def _encode_safely(self, rows: Sequence[Any]) -> Answer:
        try:
            return self._encode(rows)
        except Exception as error:
            logger.exception("could not encode an answer")
            return 500, error_body(f"the answer could not be encoded: {type(error).__name__}: {error}")


def _deliver(jobs: list[Job]) -> None:
    for job in jobs:
        if not job.future.done() and job.answer is not None:
            job.future.set_result(job.answer)
