"""Answer 504 to requests that the model has not answered within the server's ``--timeout-s``.

One sweep every ``every_s`` over the requests in arrival order (the timeout is the same for all, so their
deadlines are in order too) costs less per request than a timer each, which matters at thousands of
requests per second; an expiry is at most ``every_s`` late.

Example:
    >>> import asyncio
    >>> from torchwork.serve.batching import Job
    >>> async def late() -> tuple[int, bytes]:
    ...     job = Job([1], asyncio.get_running_loop().create_future())
    ...     Deadlines(0.01, every_s=0.01).add(job)
    ...     return await job.future
    >>> asyncio.run(late())[0]
    504
"""

from __future__ import annotations

import asyncio
import collections
import time

from torchwork.serve.batching import Job
from torchwork.serve.schemas import error_body


class Deadlines:
    """Answer 504 to the jobs added (on the event loop) that are not answered within ``timeout_s``."""

    def __init__(self, timeout_s: float, every_s: float = 0.05) -> None:
        self.timeout_s, self.every_s = timeout_s, every_s
        self._jobs: collections.deque[tuple[float, Job]] = collections.deque()
        self._sweeping = False

    def add(self, job: Job) -> None:
        """Watch ``job`` (on the event loop)."""
        self._jobs.append((time.monotonic() + self.timeout_s, job))
        if not self._sweeping:
            self._sweeping = True
            asyncio.get_running_loop().call_later(self.every_s, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        while self._jobs and (self._jobs[0][1].future.done() or self._jobs[0][0] <= now):
            _, job = self._jobs.popleft()
            expire(job, self.timeout_s)
        self._sweeping = bool(self._jobs)
        if self._sweeping:
            asyncio.get_running_loop().call_later(self.every_s, self._sweep)


def expire(job: Job, timeout_s: float) -> None:
    """Cancel ``job`` and answer it 504, unless it is answered already."""
    if not job.future.done():
        job.cancel()
        job.future.set_result((504, error_body(
            f"no prediction within {timeout_s:g} s (the server's --timeout-s); the server is overloaded or "
            "the model is slow: retry later, or send fewer items")))
