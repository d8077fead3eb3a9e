"""The one batching rule of torchwork serve, whoever runs the batches: a worker thread
(:class:`~torchwork.serve.batcher.Batcher`) or the event loop feeding a model process
(:class:`~torchwork.serve.process_batcher.ProcessBatcher`). Both hold a :class:`BatchingRule` and ask it
every question the rule answers; neither subclasses the other.

The rule:

- **Queue limits.** A request is refused (503) when ``max_queue`` items wait already, or when the server
  is shutting down.
- **Forming batches.** When the model is free it takes everything queued, in order, as far as it fits in
  ``max_batch_size`` items (a request is never split between batches), so at low load nobody pays a wait
  and under load batches grow by themselves.
- **Large requests run in parts.** A request of more than ``max_batch_size`` items, or of more work than
  the model does in ``part_s`` (25 ms; its speed measured on the batches it ran), runs as consecutive parts,
  each queued once the previous one is answered (:mod:`~torchwork.serve.request_parts`): a request that
  arrives meanwhile waits for one part at most, not for the whole of another client's request.
- **Deadlines.** It waits for more items (never longer than ``max_wait_s``) only when waiting pays: requests
  arrived while the previous batch was running, so more are arriving concurrently; and it stops waiting as
  soon as they stop coming (nothing new for a few typical gaps between arrivals).
- **The inline cost rule.** Requests are handed over once per event-loop pass, after every handler that was
  ready has submitted. A request alone in its pass, with the model idle, runs right there on the event loop
  when it is cheap: its cost (``cost(items)``, in units of a short item: the item count, plus the characters
  for text) times the measured time of one unit is under ``inline_below_s`` (20 ms by default). Nobody else
  is waiting, so it pays no hand-off and answers as fast as a per-request server would. At concurrency 1
  on a 2-vCPU VM the hand-off cost 1.4x a naive server's latency for a 0.1 ms text model and 1.6 ms on a
  6 ms CNN (1.24x): waking the worker on the other, idle vCPU is slow. Anything dearer (a slow model, or
  64 items of 10,000 characters) is handed over, so that the event loop keeps answering health checks and
  accepting requests: run inline, one such request held ``/healthz`` at 201 ms.
- **Failures.** If a batch fails, each request in it is run alone, so one bad request never fails the
  others; a model that returns another number of rows than items fails its batch.

Example:
    >>> import asyncio
    >>> rule = BatchingRule(lambda items: [2 * x for x in items], lambda rows: (200, repr(rows).encode()),
    ...                     max_batch_size=2)
    >>> async def main():
    ...     rule.attach(asyncio.get_running_loop(), hand_over=rule.run_now, idle=lambda: False)
    ...     return await asyncio.gather(*(rule.submit([i]) for i in range(3)))
    >>> asyncio.run(main())
    [(200, b'[0]'), (200, b'[2]'), (200, b'[4]')]
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from torchwork.deploy.runtime import check_row_count
from torchwork.errors import ConfigError, QueueFullError, ServeError
from torchwork.finite import is_count, is_finite_number
from torchwork.quoting import quote_value
from torchwork.serve.config import UPPER_BOUNDS
from torchwork.serve.encoding import Answer
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.request_parts import PartedJob
from torchwork.serve.schemas import error_body

logger = logging.getLogger("torchwork.serve")


class Job:
    """One queued request: await it for its answer; ``cancel()`` it if nobody will wait any longer."""

    __slots__ = ("items", "future", "cancelled", "answer", "rule", "encode", "part")

    def __init__(self, items: Sequence[Any], future: asyncio.Future[Answer], rule: BatchingRule | None = None,
                 encode: Callable[[Sequence[Any]], Any] | None = None, part: bool = False) -> None:
        self.items = items
        self.part = part  # one part of a large request (more of it follows)
        self.future = future
        self.cancelled = False
        self.answer: Answer | None = None
        self.rule = rule
        self.encode = encode  # this request's own encoder of its rows (else the rule's)

    def __await__(self) -> Generator[Any, None, Answer]:
        if self.rule is not None:
            self.rule.flush_if_alone()
        return self.future.__await__()

    def cancel(self) -> None:
        """If the model has not taken this request yet, it never runs."""
        self.cancelled = True


def deliver(jobs: Sequence[Job]) -> None:
    """On the event loop: give each job its answer (a job whose client left has no waiter any more)."""
    for job in jobs:
        if not job.future.done() and job.answer is not None:
            job.future.set_result(job.answer)


def _check_rule(max_batch_size: Any, max_wait_s: Any, max_queue: Any, inline_below_s: Any, part_s: Any) -> None:
    """The rule's numbers, within :class:`~torchwork.serve.config.ServeConfig`'s bounds, before anything is
    queued: a batch size of 0 took no item and every request waited for good; a NaN wait never flushed."""
    for name, value in (("max_batch_size", max_batch_size), ("max_queue", max_queue)):
        most = int(UPPER_BOUNDS[name][0])
        if not is_count(value, 1, most):
            raise ConfigError(f"{name}={quote_value(value)}: a whole number from 1 to {most:,}.")
    longest = UPPER_BOUNDS["max_wait_ms"][0] / 1000
    for name, value, least in (("max_wait_s", max_wait_s, "0"), ("inline_below_s", inline_below_s, "0"),
                               ("part_s", part_s, "more than 0")):
        if not (is_finite_number(value) and 0 <= value <= longest) or (name == "part_s" and value == 0):
            raise ConfigError(f"{name}={quote_value(value)}: seconds, from {least} to {longest:g}.")


class BatchingRule:
    """The rule (see the module docstring) and its bookkeeping, for one model.

    ``run(items) -> rows`` runs the model here (one row per item, in order: the worker thread's batches, or
    a lone request inline); ``encode(rows) -> (status, body)`` turns one request's rows into its answer.
    The runner of the batches calls :meth:`attach` with how to hand jobs over and whether the model is idle.
    """

    def __init__(self, run: Callable[[list[Any]], Sequence[Any]], encode: Callable[[Sequence[Any]], Answer], *,
                 max_batch_size: int = 32, max_wait_s: float = 0.002, max_queue: int = 1024,
                 metrics: ServerMetrics | None = None, inline_below_s: float = 0.02,
                 cost: Callable[[Sequence[Any]], float] = len, part_s: float = 0.025) -> None:
        _check_rule(max_batch_size, max_wait_s, max_queue, inline_below_s, part_s)
        self._run, self._encode, self._cost = run, encode, cost
        self.max_batch_size, self.max_wait_s, self.max_queue = max_batch_size, max_wait_s, max_queue
        self.inline_below_s, self.part_s = inline_below_s, part_s
        self.metrics = metrics
        self.unit_seconds = math.inf  # smoothed time per unit of cost of a lone item (unknown until measured)
        # Seconds and cost units of recent batches, decaying: the time per unit of cost in a batch, weighted by
        # cost (what sizes a large request's parts).
        self._batch_seconds, self._batch_units = 0.0, 0.0
        # Each counter has a single writer thread (submitted/last_arrival/gap: the event loop; taken: whoever
        # takes jobs for the model), so no lock is needed.
        self.submitted = 0  # items ever queued
        self.taken = 0  # items ever taken for the model
        self.last_arrival = 0.0
        self.gap = 0.0  # smoothed time between arrivals
        self.stopping = False
        self.pending: list[Job] = []  # submitted during this event-loop pass, not handed over yet
        self._flush_handle: asyncio.Handle | None = None  # the pass's scheduled flush, until it runs
        self.model_lock = threading.Lock()  # the local model runs on one thread at a time
        self.loop: asyncio.AbstractEventLoop | None = None
        self._hand_over: Callable[[list[Job]], None] = self.run_now
        self._idle: Callable[[], bool] = lambda: False

    def attach(self, loop: asyncio.AbstractEventLoop, hand_over: Callable[[list[Job]], None],
               idle: Callable[[], bool]) -> None:
        """Answer on ``loop``; ``hand_over(jobs)`` queues jobs for the model; ``idle()`` says whether a lone
        request may run inline now (and if so holds :attr:`model_lock`, released after the run)."""
        self.loop, self._hand_over, self._idle = loop, hand_over, idle

    @property
    def queued_items(self) -> int:
        """Items waiting for the model."""
        return self.submitted - self.taken

    # ------------------------------------------------------------------ on the event loop
    def submit(self, items: Sequence[Any], encode: Callable[[Sequence[Any]], Any] | None = None,
               admitted: bool = False) -> Job:
        """Queue one request; raise :class:`~torchwork.errors.QueueFullError` when ``max_queue`` items wait
        already or the server is shutting down (the server answers 503). ``encode``: this request's encoder
        of its rows, in place of the rule's (another protocol's answer from the same batch); ``admitted``:
        a part of a request whose items were admitted and counted as queued already (all at once)."""
        if self.loop is None:
            raise ServeError("the batcher is not started: call start(loop) (thread batcher) or await open() on the "
                             "event loop first")
        if not admitted:
            self.admit(len(items))
        elif self.stopping:
            raise QueueFullError("the server is shutting down; retry on another instance or later")
        job = Job(items, self.loop.create_future(), self, encode, part=admitted)
        now = time.monotonic()
        self.gap = 0.8 * self.gap + 0.2 * min(now - self.last_arrival, 1.0)
        self.last_arrival = now
        if not admitted:
            self.submitted += len(items)
        self.pending.append(job)
        if self._flush_handle is None:  # after the handlers that are ready in this pass have submitted
            self._flush_handle = self.loop.call_soon(self._flush)
        return job

    def admit(self, count: int) -> None:
        """Raise :class:`~torchwork.errors.QueueFullError` unless a request of ``count`` items may queue now."""
        if self.stopping:
            raise QueueFullError("the server is shutting down; retry on another instance or later")
        queued = self.submitted - self.taken
        if queued and queued + count > self.max_queue:
            raise QueueFullError(f"the queue holds {queued} items (--max-queue {self.max_queue}); retry later")

    def parts(self, items: Sequence[Any]) -> list[slice]:
        """How ``items`` (one request) go to the model: consecutive slices of at most ``max_batch_size`` items,
        each about ``part_s`` of work once the model's speed in batches is known (one slice: run it whole).

        Example:
            >>> BatchingRule(len, len, max_batch_size=4).parts(list(range(10)))
            [slice(0, 4, None), slice(4, 8, None), slice(8, 10, None)]
        """
        limit = self.part_s * self._batch_units / self._batch_seconds if self._batch_seconds else math.inf
        if len(items) <= 1 or (len(items) <= self.max_batch_size and self._cost(items) <= limit):
            return [slice(0, len(items))]
        slices, start, work = [], 0, 0.0
        for index in range(len(items)):
            cost = self._cost(items[index:index + 1])
            if index > start and (index - start >= self.max_batch_size or work + cost > limit):
                slices.append(slice(start, index))
                start, work = index, 0.0
            work += cost
        slices.append(slice(start, len(items)))
        return slices

    def flush_if_alone(self) -> None:
        """As a handler starts to wait: if the scheduled flush is the only callback left in this loop pass
        (asyncio's ready queue), no other handler can submit before it, so flush now. A lone request then
        costs no loop passes to be flushed and to wake its handler (2 x 15-30 us at concurrency 1)."""
        handle = self._flush_handle
        ready = getattr(self.loop, "_ready", None)  # asyncio's; another loop keeps the scheduled flush
        # (a flush cancelled here before stays queued until the next pass: it does not count)
        if handle is not None and ready is not None and all(h is handle or h.cancelled() for h in ready):
            handle.cancel()
            self._flush()

    def _flush(self) -> None:
        """Run a lone cheap request inline if the model is idle, else hand everything over."""
        self._flush_handle = None
        jobs, self.pending = self.pending, []
        if len(jobs) == 1 and not self.stopping and self.estimate(jobs[0].items) < self.inline_below_s \
                and self._idle():
            try:
                self.taken += len(jobs[0].items)
                if not jobs[0].cancelled:
                    self.execute(jobs)
            finally:
                self.model_lock.release()
            deliver(jobs)
            return
        self._hand_over(jobs)

    def take_pending(self) -> list[Job]:
        """Stop accepting requests; the jobs submitted in this pass and not handed over yet (they still run)."""
        self.stopping = True
        jobs, self.pending = self.pending, []
        return jobs

    def estimate(self, items: Sequence[Any]) -> float:
        """Seconds the model would take for ``items`` alone (infinite until one lone item was timed)."""
        return self.unit_seconds * self._cost(items)

    def cost(self, items: Sequence[Any]) -> float:
        """``items``' cost in units of a short item."""
        return self._cost(items)

    # ------------------------------------------------------------------ forming batches
    def fits(self, size: int, job: Job) -> bool:
        """Whether ``job`` joins a batch of ``size`` items (a first job always does)."""
        return not size or size + len(job.items) <= self.max_batch_size

    def should_wait(self, concurrent: bool, size: int) -> bool:
        """Wait for more items before running a batch of ``size``: only while requests arrive concurrently."""
        return concurrent and size < self.max_batch_size and self.max_wait_s > 0 and not self.stopping

    def wait_until(self, deadline: float) -> float:
        """When to stop waiting for more (``time.monotonic()`` time): at ``deadline`` (the first wait plus
        ``max_wait_s``), or once nothing new arrived for a few typical gaps between arrivals."""
        patience = min(max(3 * self.gap, 0.0002), self.max_wait_s)
        return min(deadline, max(self.last_arrival, time.monotonic()) + patience)

    # ------------------------------------------------------------------ running and answering
    def run_now(self, jobs: list[Job]) -> None:
        """Run ``jobs`` here at once and answer them (the simplest runner: no batching across passes)."""
        self.taken += sum(len(job.items) for job in jobs)
        with self.model_lock:
            self.execute([job for job in jobs if not job.cancelled])
        deliver(jobs)

    def execute(self, jobs: list[Job]) -> None:
        """Run the jobs' items together here (in chunks of ``max_batch_size``) and set each job's answer."""
        if not jobs:
            return
        started = time.perf_counter()
        items = [item for job in jobs for item in job.items]
        try:
            rows: list[Any] = []
            for start in range(0, len(items), self.max_batch_size):
                chunk = items[start:start + self.max_batch_size]
                out = self._run(chunk)
                check_row_count(out, len(chunk))
                rows.extend(out[i] for i in range(len(chunk)))
        except Exception as error:
            if len(jobs) > 1:  # find the request that fails; the others still get their answers
                for job in jobs:
                    self.execute([job])
                return
            logger.exception("the model failed on a request")
            self.fail(jobs, f"the model failed on this request: {type(error).__name__}: {error}. The server "
                            "keeps serving; check the input or the model.")
            return
        self.answer(jobs, rows)
        elapsed = time.perf_counter() - started
        self.observe(jobs, len(items), elapsed)

    def answer(self, jobs: list[Job], rows: Sequence[Any]) -> None:
        """Set each job's answer from its slice of the batch's ``rows`` (one per item, in order)."""
        start = 0
        for job in jobs:
            end = start + len(job.items)
            job.answer = self.encode_rows(rows[start:end], job.encode)
            start = end

    def encode_rows(self, rows: Sequence[Any], encode: Callable[[Sequence[Any]], Any] | None = None) -> Answer:
        """One request's answer from its ``rows`` (``encode``: the request's own encoder, else the rule's)."""
        try:
            return (encode or self._encode)(rows)
        except Exception as error:
            logger.exception("could not encode an answer")
            return 500, error_body(f"the answer could not be encoded: {type(error).__name__}: {error}")

    def fail(self, jobs: Sequence[Job], message: str, status: int = 500) -> None:
        """Answer every job with an error."""
        for job in jobs:
            job.answer = (status, error_body(message))

    def observe(self, jobs: list[Job], size: int, elapsed: float) -> None:
        """Record a batch of ``size`` items that took ``elapsed`` seconds: metrics, and the time per unit of
        cost when it was a lone item (what decides whether requests run inline)."""
        cost = sum(self._cost(job.items) for job in jobs)
        self._batch_seconds = 0.9 * self._batch_seconds + elapsed
        self._batch_units = 0.9 * self._batch_units + cost
        if size == 1:
            unit = elapsed / max(cost, 1e-9)
            self.unit_seconds = unit if math.isinf(self.unit_seconds) else 0.7 * self.unit_seconds + 0.3 * unit
        if self.metrics is not None:
            for start in range(0, size, self.max_batch_size):
                self.metrics.batch_size.observe(min(self.max_batch_size, size - start))
            self.metrics.batch_seconds.observe(elapsed)


class Batching:
    """What a server calls on a batcher, whoever runs its batches: :meth:`submit`, :attr:`queued_items`,
    :attr:`metrics`, all answered by its :class:`BatchingRule` (``self.rule``)."""

    rule: BatchingRule

    @property
    def metrics(self) -> ServerMetrics | None:
        return self.rule.metrics

    @metrics.setter
    def metrics(self, metrics: ServerMetrics | None) -> None:
        self.rule.metrics = metrics

    @property
    def queued_items(self) -> int:
        """Items waiting for the model."""
        return self.rule.queued_items

    def submit(self, items: Sequence[Any], encode: Callable[[Sequence[Any]], Any] | None = None
               ) -> Job | PartedJob:
        """Queue one request (on the event loop); see :meth:`BatchingRule.submit`. A large one runs in
        parts (:meth:`BatchingRule.parts`)."""
        parts = self.rule.parts(items)
        if len(parts) > 1:
            return PartedJob(self.rule, items, encode, parts)
        return self.rule.submit(items, encode)

    async def open(self) -> None:
        """Start answering on the running loop (each runner starts its thread or connects its process)."""
        raise NotImplementedError

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Refuse new requests, finish everything queued, then stop the runner."""
        raise NotImplementedError
