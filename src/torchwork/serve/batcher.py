"""Dynamic batching on a worker thread: requests queue up, one thread runs them together, off the event loop.

This is the in-process batcher (``torchwork serve --no-model-process``, and ``serve()`` in Python); with a
model process, :class:`~torchwork.serve.process_batcher.ProcessBatcher` runs the batches from the event loop
itself. Both follow one rule, :class:`~torchwork.serve.batching.BatchingRule` (queue limits, forming batches,
deadlines, the inline cost rule, failures): this module only moves jobs to the thread and answers back,
with one ``call_soon_threadsafe`` per batch.

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
import collections
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.serve.batching import Batching, BatchingRule, Job, deliver
from torchwork.serve.encoding import Answer


class Batcher(Batching):
    """Queue requests (lists of items) and run them in batches on one worker thread.

    ``run(items) -> rows`` is the model (one row per item, in order) and ``encode(rows) -> (status, body)``
    turns one request's rows into its answer; both run on the worker thread (a lone request of a fast
    model: on the event loop). The options are :class:`~torchwork.serve.batching.BatchingRule`'s.
    """

    def __init__(self, run: Callable[[list[Any]], Sequence[Any]], encode: Callable[[Sequence[Any]], Answer],
                 **options: Any) -> None:
        self.rule = BatchingRule(run, encode, **options)
        # A SimpleQueue hands jobs over with one C-level lock: one entry per event-loop pass (all the jobs that
        # pass submitted), so the worker never wakes between two requests that arrived together.
        self._queue: queue.SimpleQueue[list[Job] | None] = queue.SimpleQueue()
        self._taken: collections.deque[Job | None] = collections.deque()  # the worker's: handed over, not yet taken
        self._thread: threading.Thread | None = None

    async def open(self) -> None:
        """Start the worker, answering on the running loop."""
        self.start(asyncio.get_running_loop())

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the worker; answers are delivered on ``loop``."""
        self.rule.attach(loop, self._hand_over, self._idle)
        self._thread = threading.Thread(target=self._work, name="torchwork-batcher", daemon=True)
        self._thread.start()

    def _idle(self) -> bool:
        """Nothing queued and the model free; if so, hold the model lock (released by the rule)."""
        return self._queue.empty() and not self._taken and self.rule.model_lock.acquire(False)

    def _hand_over(self, jobs: list[Job]) -> None:
        if jobs:
            self._queue.put(list(jobs))

    def _next(self, timeout: float | None = None, wait: bool = True) -> Job | None:
        """The worker's next job (None: the stop marker); raise queue.Empty if none comes in time."""
        while not self._taken:
            entry = self._queue.get(wait, timeout)
            self._taken.extend(entry if entry is not None else [None])
        return self._taken.popleft()

    async def shutdown(self, timeout: float = 30.0) -> None:
        """On the event loop: :meth:`stop` without blocking it."""
        await asyncio.get_running_loop().run_in_executor(None, self.stop, timeout)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Refuse new requests, finish everything queued, then end the worker thread."""
        if not self.rule.stopping:
            self._hand_over(self.rule.take_pending())  # submitted but not handed over yet: they still run
            self._queue.put(None)  # behind every queued job
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker thread
    def _work(self) -> None:
        rule = self.rule
        held: Job | None = None  # taken off the queue but did not fit in the last batch
        arrivals_while_running = 0
        stop = False
        while not stop:
            first = held if held is not None else self._next()
            held = None
            if first is None:
                return
            jobs, size = [first], len(first.items)
            while size < rule.max_batch_size:  # everything already queued, as far as it fits
                try:
                    job = self._next(wait=False)
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                if not rule.fits(size, job):
                    held = job
                    break
                jobs.append(job)
                size += len(job.items)
            if not stop and held is None and rule.should_wait(arrivals_while_running > 0, size):
                size, held, stop = self._wait_for_more(jobs, size)
            rule.taken += size
            arrivals_before = rule.submitted
            jobs = [job for job in jobs if not job.cancelled]
            if not jobs:
                continue
            with rule.model_lock:
                rule.execute(jobs)
            # Counted before the answers go out: a client that gets its answer and sends again at once
            # (concurrency 1) must not look like concurrent load.
            arrivals_while_running = rule.submitted - arrivals_before
            try:
                rule.loop.call_soon_threadsafe(deliver, jobs)  # type: ignore[union-attr]
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _wait_for_more(self, jobs: list[Job], size: int) -> tuple[int, Job | None, bool]:
        """Collect more until the rule says stop waiting or the batch is full.

        Returns the new size, a job that did not fit (or None), and whether the stop marker was seen.
        """
        rule = self.rule
        deadline = time.monotonic() + rule.max_wait_s
        while size < rule.max_batch_size:
            until = rule.wait_until(deadline)
            now = time.monotonic()
            if until <= now:
                break
            try:
                job = self._next(timeout=until - now)
            except queue.Empty:
                break
            if job is None:
                return size, None, True
            if not rule.fits(size, job):
                return size, job, False
            jobs.append(job)
            size += len(job.items)
        return size, None, False
