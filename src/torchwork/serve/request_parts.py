"""A large request runs as consecutive parts, each queued behind whatever arrived while the last one ran.

Without parts, one client's maximum-size request (64 texts of 10,000 characters) is one long batch, and a
one-tweet request that arrives meanwhile waits for all of it: 563 ms at the median against 1.6 ms alone,
however small it is. With parts, the large request goes to the model a part at a time (each part bounded by
the rule's measured work, :meth:`~torchwork.serve.batching.BatchingRule.parts`), and the next part is queued
only once the previous one is answered, so a request that arrived meanwhile is already ahead of it: a light
request waits for at most one part, whatever the size of the other client's request. The large request
pays one hand-off per part.

A request is admitted whole (the queue limit is checked once, for all its items); its answer is encoded
once from all its rows, so the client sees exactly what one batch would have answered. A part that fails
ends the request with that part's error; a deadline or a client that leaves stops the parts not yet queued.

Example:
    >>> import asyncio
    >>> from torchwork.serve.batching import BatchingRule
    >>> rule = BatchingRule(lambda items: [2 * x for x in items], lambda rows: (200, repr(list(rows)).encode()),
    ...                     max_batch_size=2)
    >>> async def main():
    ...     rule.attach(asyncio.get_running_loop(), hand_over=rule.run_now, idle=lambda: False)
    ...     return await PartedJob(rule, [1, 2, 3, 4, 5], None, rule.parts([1, 2, 3, 4, 5]))
    >>> asyncio.run(main())
    (200, b'[2, 4, 6, 8, 10]')
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from torchwork.errors import QueueFullError
from torchwork.serve.encoding import Answer
from torchwork.serve.schemas import error_body

if TYPE_CHECKING:
    from torchwork.serve.batching import BatchingRule, Job

logger = logging.getLogger("torchwork.serve")


def _keep_rows(rows: Sequence[Any]) -> Answer:
    """A part's encoder: keep its rows as they are; the whole request is encoded once at the end."""
    return 200, list(rows)  # type: ignore[return-value]


class PartedJob:
    """One request run as consecutive parts (``parts``: slices of ``items``); await it for its answer.

    It quacks like :class:`~torchwork.serve.batching.Job` where the server touches one: ``future`` (a
    deadline sets it), ``cancel()`` and ``await``. The first part is queued here, so a full queue raises
    :class:`~torchwork.errors.QueueFullError` at once, as for any request.
    """

    def __init__(self, rule: BatchingRule, items: Sequence[Any], encode: Callable[[Sequence[Any]], Any] | None,
                 parts: Sequence[slice]) -> None:
        self.rule, self.items, self.parts = rule, items, list(parts)
        self.encode = encode
        self.cancelled = False
        rule.admit(len(items))
        self.current: Job = rule.submit(items[self.parts[0]], _keep_rows, admitted=True)
        rule.submitted += len(items)  # the whole request counts as queued until each part is taken
        self._unsent = len(items) - len(self.current.items)
        assert rule.loop is not None  # submit raised otherwise
        self.future: asyncio.Future[Answer] = rule.loop.create_future()
        # Held here: the event loop keeps only a weak reference to a task.
        self._task = asyncio.ensure_future(self._run(), loop=rule.loop)

    def __await__(self) -> Generator[Any, None, Answer]:
        self.rule.flush_if_alone()
        return self.future.__await__()

    def cancel(self) -> None:
        """Run no more of it: the part queued now is dropped if the model has not taken it yet."""
        self.cancelled = True
        self.current.cancel()  # a cancelled part is never answered: stop waiting for it
        self._task.cancel()
        self._drop_unsent()

    async def _run(self) -> None:
        rows: list[Any] = []
        for index, part in enumerate(self.parts):
            if index:
                if self.cancelled or self.future.done():
                    return self._drop_unsent()
                try:
                    self.current = self.rule.submit(self.items[part], _keep_rows, admitted=True)
                except QueueFullError as stopping:  # only a shutdown refuses an admitted request's part
                    self._finish((503, error_body(f"the server is busy: {stopping}")))
                    return self._drop_unsent()
                self._unsent -= len(self.current.items)
            status, payload = await self.current
            if status != 200:
                self._finish((status, payload))
                return self._drop_unsent()
            rows.extend(payload)  # type: ignore[arg-type]
        self._finish(self.rule.encode_rows(rows, self.encode))

    def _drop_unsent(self) -> None:
        """The parts that will never be queued no longer count as queued."""
        self.rule.taken += self._unsent
        self._unsent = 0

    def _finish(self, answer: Answer) -> None:
        if not self.future.done():
            self.future.set_result(answer)
