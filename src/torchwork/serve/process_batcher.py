"""Dynamic batching on the event loop, for a model that runs in a :class:`ModelProcess`.

With the model in another process there is nothing to compute here, so no worker thread: the event loop
forms each batch, writes it to the child's socket and reads the answers when they arrive, between HTTP
requests. A worker thread would have to take the GIL from the busy loop to hand each batch over and again
to take its answers back, and each take can wait for the interpreter's switch interval (5 ms). Without
it, and with the child encoding the answers, the server process spent 0.18-0.19 ms of CPU per request
for the quickstart's text model at concurrency 64, against 0.238 ms with the thread (the HTTP ceiling's
trivial endpoint: 0.17-0.19 ms).

Batching follows the one rule of :class:`~torchwork.serve.batching.BatchingRule`, as the thread's
:class:`~torchwork.serve.batcher.Batcher` does: this class holds one and only moves batches to the child
and answers back. A lone request with the child idle runs inline on the event loop on this process's copy
of the model when that is cheap; so does one that would otherwise wait behind a batch the child needs
more than ``busy_inline_s`` (50 ms) more for, or behind a part of a large request (64 items of 10,000
characters run in parts: :mod:`~torchwork.serve.request_parts`): a light request then waits for no large one. The child encodes the answers
(:mod:`torchwork.serve.encoding`); this process only joins each request's bytes. If the child dies, the
batch it was running answers 500 and a new child starts while requests queue.

Example (not run here: it starts a process; the server builds this for ``--model-process``):
    batcher = ProcessBatcher(ModelProcess(build, path), answer, run_inline=local_run)
    await batcher.open()
    status, body = await batcher.submit(["a tweet"])
    await batcher.shutdown()
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.serve.batching import Batching, BatchingRule, Job, deliver
from torchwork.serve.encoding import Answer
from torchwork.serve.model_process import ModelProcess

logger = logging.getLogger("torchwork.serve")


class ProcessBatcher(Batching):
    """Queue requests and run them in batches in ``process``, from the event loop.

    ``encode(fragments) -> (status, body)`` joins one request's fragments; ``run_inline(items) ->
    fragments`` runs a lone request here; ``pack(items)`` turns a batch's items into what is sent (one
    array for fixed-shape tensors pickles far faster than nested lists); ``inline=False``: never run a
    request here (this process holds no model, as for a text model whose tokenizer only the child loads).
    The other options are
    :class:`~torchwork.serve.batching.BatchingRule`'s.
    """

    def __init__(self, process: ModelProcess, encode: Callable[[Sequence[Any]], Answer], *,
                 run_inline: Callable[[list[Any]], Sequence[Any]], pack: Callable[[list[Any]], Any] = list,
                 busy_inline_s: float = 0.05, inline: bool = True, **options: Any) -> None:
        self.rule = BatchingRule(run_inline, encode, **options)  # its run: only lone requests, here
        self.process, self._pack = process, pack
        self.busy_inline_s, self.inline = busy_inline_s, inline
        self._in_flight_cost = 0.0  # the cost of the batch in the child
        # The child's seconds and cost units over recent batches, decaying: its time per unit of cost in a
        # batch, weighted by cost, so a lone request's hand-off overhead does not make a batch look long.
        self._child_seconds, self._child_units = 0.0, 0.0
        self._waiting: collections.deque[Job] = collections.deque()  # handed over, not sent yet
        self._alone: collections.deque[Job] = collections.deque()  # from a failed batch: each runs alone
        self._in_flight: list[Job] | None = None
        self._sent_at, self._arrivals_at_send = 0.0, 0
        self._concurrent = False  # requests arrived while the last batch ran
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._connected = False
        self._restarting: asyncio.Future[None] | None = None
        self._drained = asyncio.Event()

    async def open(self) -> None:
        """Start answering: connect the (started) model process to the running loop."""
        self.rule.attach(asyncio.get_running_loop(), self._hand_over, self._idle)
        await self.process.connect(self._on_answer, self._on_lost)
        self._connected = True

    def _idle(self) -> bool:
        """Nothing waits, and the child is free or busy for long (a long batch, or a part of a large request,
        more of which follows); then hold the local model."""
        if not self.inline or not self._connected or self._waiting or self._alone:
            return False
        if self._in_flight is not None and self._child_remaining() < self.busy_inline_s \
                and not any(job.part for job in self._in_flight):
            return False
        return self.rule.model_lock.acquire(False)

    def _child_remaining(self) -> float:
        """Seconds the batch in the child should still take (0 until a batch was timed)."""
        if not self._child_units:
            return 0.0
        expected = self._child_seconds / self._child_units * self._in_flight_cost
        return expected - (time.perf_counter() - self._sent_at)

    def _hand_over(self, jobs: list[Job]) -> None:
        self._waiting.extend(jobs)
        self._dispatch()

    # ------------------------------------------------------------------ forming and sending batches
    def _dispatch(self, force: bool = False) -> None:
        """Send the next batch if the child is free and (unless ``force``) waiting would not fill it more."""
        rule = self.rule
        if self._in_flight is not None or not self._connected:
            return
        while self._alone:
            job = self._alone.popleft()
            if not job.cancelled:
                self._send([job], taken=True)
                return
        while self._waiting and self._waiting[0].cancelled:
            rule.taken += len(self._waiting.popleft().items)
        if not self._waiting:
            if rule.stopping:
                self._drained.set()
            return
        queued = 0
        for job in self._waiting:
            queued += len(job.items)
            if queued >= rule.max_batch_size:
                break
        if not force and rule.should_wait(self._concurrent, queued):
            if self._timer is None:  # requests are arriving concurrently: collect more until they stop
                self._deadline = time.monotonic() + rule.max_wait_s
                self._wait_for_more()
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        jobs, size = [], 0
        while self._waiting and rule.fits(size, self._waiting[0]):
            job = self._waiting.popleft()
            if job.cancelled:
                rule.taken += len(job.items)
                continue
            jobs.append(job)
            size += len(job.items)
        self._send(jobs)

    def _wait_for_more(self) -> None:
        """Until the rule says stop waiting; then send."""
        self._timer = None
        until = self.rule.wait_until(self._deadline)
        now = time.monotonic()
        if until > now:
            self._timer = self.rule.loop.call_later(until - now, self._wait_for_more)  # type: ignore[union-attr]
        else:
            self._dispatch(force=True)

    def _send(self, jobs: list[Job], taken: bool = False) -> None:
        """Send ``jobs`` as one batch; ``taken``: their items were counted off the queue already (a retry)."""
        if not jobs:
            return self._dispatch()
        items = [item for job in jobs for item in job.items]
        if not taken:
            self.rule.taken += len(items)
        try:
            payload = self._pack(items)
        except Exception as error:  # validated items always pack; never leave the requests hanging
            self._fail(jobs, f"the batch could not be prepared: {type(error).__name__}: {error}")
            return self._dispatch()
        self._in_flight, self._sent_at, self._arrivals_at_send = jobs, time.perf_counter(), self.rule.submitted
        self._in_flight_cost = self.rule.cost(items)
        self.process.send(payload, self.rule.max_batch_size)

    # ------------------------------------------------------------------ answers from the child
    def _on_answer(self, message: tuple[str, Any]) -> None:
        rule = self.rule
        jobs, self._in_flight = self._in_flight or [], None
        status, payload = message
        elapsed = time.perf_counter() - self._sent_at
        size = sum(len(job.items) for job in jobs)
        if status == "ok" and len(payload) == size:  # the rows' count is checked in the child too
            rule.answer(jobs, payload)
            self._child_seconds = 0.9 * self._child_seconds + elapsed
            self._child_units = 0.9 * self._child_units + self._in_flight_cost
            rule.observe(jobs, size, elapsed)
        elif len(jobs) > 1:  # find the request that fails; the others still get their answers
            self._alone.extend(jobs)
        elif jobs:
            detail = payload if status != "ok" else f"{len(payload)} answers for {size} items"
            logger.error("the model failed on a request: %s", detail)
            rule.fail(jobs, f"the model failed on this request: {detail}. The server keeps serving; check "
                            "the input or the model.")
        deliver(jobs)
        self._concurrent = rule.submitted > self._arrivals_at_send
        self._dispatch()

    def _fail(self, jobs: list[Job], message: str, status: int = 500) -> None:
        self.rule.fail(jobs, message, status)
        deliver(jobs)

    def _on_lost(self) -> None:
        """The child died (or was disconnected at shutdown): answer its batch, start a new one."""
        self._connected = False
        jobs, self._in_flight = self._in_flight, None
        if jobs:
            self._fail(jobs, "the model process died while predicting this batch; a new one is starting. "
                             "Retry the request.")
        if not self.rule.stopping:
            self._restarting = asyncio.ensure_future(self._restart())  # held: the loop keeps only weak refs

    async def _restart(self) -> None:
        while not self.rule.stopping:
            try:
                await self.rule.loop.run_in_executor(None, self.process.restart)  # type: ignore[union-attr]
                await self.process.connect(self._on_answer, self._on_lost)
            except Exception:
                logger.exception("could not start a new model process; trying again in 1 s")
                await asyncio.sleep(1.0)
                continue
            self._connected = True
            self._dispatch()
            return

    # ------------------------------------------------------------------ shutdown
    async def shutdown(self, timeout: float = 30.0) -> None:
        """Refuse new requests, finish everything queued, then end the model process."""
        self._waiting.extend(self.rule.take_pending())
        self._dispatch(force=True)
        if self._in_flight is None and not self._waiting and not self._alone:
            self._drained.set()
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except asyncio.TimeoutError:
            logger.error("requests still queued after %g s of shutdown; answering them 503", timeout)
        left = [job for job in (*self._alone, *self._waiting) if not job.cancelled]
        self._alone.clear()
        self._waiting.clear()
        self._fail(left, "the server is shutting down; retry on another instance or later", 503)
        self.process.disconnect()
        await asyncio.get_running_loop().run_in_executor(None, self.process.close)
