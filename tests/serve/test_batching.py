"""serve/batching.py and its runners: requests batched, answered in order, failures kept to their own
request, full queues refused, lone requests never kept waiting (moved here from test_serve_units.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from torchwork.errors import ConfigError, ServeError
from torchwork.serve import Batcher, ServeConfig


def run_async(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_concurrent_requests_are_batched_and_answered_in_order():
    gate = threading.Event()
    seen: list[list[int]] = []

    def model(items):
        gate.wait(5)  # the first batch blocks until everything else is queued
        seen.append(list(items))
        return [x * 10 for x in items]

    batcher = Batcher(model, lambda rows: (200, json.dumps(list(rows)).encode()), max_batch_size=4)

    async def main():
        batcher.start(asyncio.get_running_loop())
        jobs = [batcher.submit([i, i + 100]) for i in range(5)]
        await asyncio.sleep(0.05)
        gate.set()
        answers = await asyncio.gather(*jobs)
        batcher.stop()
        return answers

    answers = run_async(main())
    assert answers == [(200, json.dumps([i * 10, (i + 100) * 10]).encode()) for i in range(5)]
    assert all(len(batch) <= 4 for batch in seen) and max(len(batch) for batch in seen) == 4
    assert sorted(x for batch in seen for x in batch) == sorted([i for i in range(5)] + [i + 100 for i in range(5)])


def test_a_request_larger_than_a_batch_runs_in_chunks():
    seen: list[int] = []

    def model(items):
        seen.append(len(items))
        return [x + 1 for x in items]

    batcher = Batcher(model, lambda rows: (200, json.dumps(list(rows)).encode()), max_batch_size=4)

    async def main():
        batcher.start(asyncio.get_running_loop())
        answer = await batcher.submit(list(range(10)))
        batcher.stop()
        return answer

    assert run_async(main()) == (200, json.dumps(list(range(1, 11))).encode())
    assert seen == [4, 4, 2] and batcher.queued_items == 0


def test_a_failing_request_does_not_fail_its_batch_neighbours():
    gate = threading.Event()

    def model(items):
        gate.wait(5)
        if "boom" in items:
            raise ValueError("cannot take boom")
        return [len(x) for x in items]

    batcher = Batcher(model, lambda rows: (200, json.dumps(list(rows)).encode()), max_batch_size=8)

    async def main():
        batcher.start(asyncio.get_running_loop())
        jobs = [batcher.submit(["a"]), batcher.submit(["bb", "boom"]), batcher.submit(["ccc"])]
        await asyncio.sleep(0.05)
        gate.set()
        answers = await asyncio.gather(*jobs)
        batcher.stop()
        return answers

    first, bad, last = run_async(main())
    assert first == (200, b"[1]") and last == (200, b"[3]")
    assert bad[0] == 500 and b"ValueError: cannot take boom" in bad[1]


def test_a_model_that_returns_another_number_of_rows_fails_only_its_request_and_a_batcher_must_start():
    batcher = Batcher(lambda items: [0] * (len(items) + (items[0] == "extra")),
                      lambda rows: (200, json.dumps(list(rows)).encode()), max_batch_size=8)
    with pytest.raises(ServeError, match="not started"):
        batcher.submit(["a"])

    async def main():
        batcher.start(asyncio.get_running_loop())
        answers = await asyncio.gather(batcher.submit(["extra", "b"]), batcher.submit(["c"]))
        batcher.stop()
        return answers

    bad, good = run_async(main())
    assert good == (200, b"[0]")
    assert bad[0] == 500 and b"ModelOutputError: the model returned 3 rows for 2 items" in bad[1]


def test_the_http_parser_is_validated():
    with pytest.raises(ConfigError, match="http='nginx': choose one of h11, httptools"):
        ServeConfig(http="nginx")
    with pytest.raises(ConfigError, match="port=<an integer of 5001 digits or so> is not a TCP port"):
        ServeConfig(port=10**5000)  # the message's own str() raised ValueError (4,300 digits at most)
    for port in (2.5, "8000", 65536, -1):
        with pytest.raises(ConfigError, match="is not a TCP port"):
            ServeConfig(port=port)


def test_full_queue_refuses_and_cancelled_jobs_never_run():
    gate = threading.Event()
    ran: list[int] = []

    def model(items):
        gate.wait(5)
        ran.extend(items)
        return items

    batcher = Batcher(model, lambda rows: (200, b"ok"), max_batch_size=1, max_queue=2)

    async def main():
        from torchwork.errors import QueueFullError

        batcher.start(asyncio.get_running_loop())
        first = batcher.submit([1])
        await asyncio.sleep(0.05)  # the worker took it and blocks
        second, third = batcher.submit([2]), batcher.submit([3])
        with pytest.raises(QueueFullError, match="the queue holds 2 items"):
            batcher.submit([4])
        third.cancel()
        gate.set()
        answers = await asyncio.gather(first, second)
        batcher.stop()
        return answers

    assert run_async(main()) == [(200, b"ok"), (200, b"ok")]
    assert ran == [1, 2]


def test_at_concurrency_one_the_batcher_never_waits():
    batcher = Batcher(lambda items: items, lambda rows: (200, b"ok"), max_batch_size=8, max_wait_s=0.5)

    async def main():
        batcher.start(asyncio.get_running_loop())
        started = time.monotonic()
        for i in range(20):
            await batcher.submit([i])
        elapsed = time.monotonic() - started
        batcher.stop()
        return elapsed

    # Each wait would cost 0.5 s: 20 sequential requests finishing at all shows none was paid.
    assert run_async(main()) < 5


def _threads_running(model_seconds: float) -> tuple[list[bool], list[int]]:
    """Which requests ran on the event loop's thread: three sequential lone ones, then two together."""
    on_loop: list[bool] = []
    sizes: list[int] = []
    loop_thread: list[int] = []

    def model(items):
        time.sleep(model_seconds)
        on_loop.append(threading.get_ident() == loop_thread[0])
        sizes.append(len(items))
        return items

    batcher = Batcher(model, lambda rows: (200, b"ok"), max_batch_size=8, inline_below_s=0.005)

    async def main():
        loop_thread.append(threading.get_ident())
        batcher.start(asyncio.get_running_loop())
        for i in range(3):
            assert await batcher.submit([i]) == (200, b"ok")
        await asyncio.gather(batcher.submit([7]), batcher.submit([8]))  # submitted in the same loop pass
        batcher.stop()

    run_async(main())
    return on_loop, sizes


def test_a_lone_request_runs_on_the_event_loop_once_the_model_is_known_to_be_fast():
    on_loop, sizes = _threads_running(0.0)
    # the first is timed on the worker; then lone requests skip the hand-off; two at once go to the worker
    assert on_loop == [False, True, True, False] and sizes == [1, 1, 1, 2]


def test_a_lone_inline_request_is_answered_without_another_loop_pass():
    import selectors

    class CountingSelector(selectors.DefaultSelector):  # each event-loop pass polls once
        polls = 0

        def select(self, timeout=None):
            CountingSelector.polls += 1
            return super().select(timeout)

    batcher = Batcher(lambda items: items, lambda rows: (200, b"ok"), max_batch_size=8, inline_below_s=0.005)

    async def main():
        batcher.start(asyncio.get_running_loop())
        await batcher.submit([0])  # timed on the worker: now the model is known to be fast
        await asyncio.sleep(0.05)  # the worker's last wake-ups have arrived: each request is alone in its pass
        polls = []
        for i in range(3):
            before = CountingSelector.polls
            assert await batcher.submit([i]) == (200, b"ok")
            polls.append(CountingSelector.polls - before)
        both = asyncio.gather(batcher.submit([7]), batcher.submit([8]))  # one pass: still batched together
        assert await both == [(200, b"ok"), (200, b"ok")]
        batcher.stop()
        return polls

    loop = asyncio.SelectorEventLoop(CountingSelector())
    try:
        # before, each lone request took two passes: one to flush it, one to wake its handler
        assert loop.run_until_complete(asyncio.wait_for(main(), 30)) == [0, 0, 0]
    finally:
        loop.close()


def test_a_slow_model_always_runs_on_the_worker():
    on_loop, sizes = _threads_running(0.02)  # 20 ms per call: over inline_below_s, the loop must stay free
    assert on_loop == [False, False, False, False] and sizes == [1, 1, 1, 2]




@pytest.mark.parametrize(("settings", "message"), [
    ({"max_batch_size": 0}, r"max_batch_size=0: a whole number from 1 to 65,536"),  # no item was ever taken
    ({"max_batch_size": 2.5}, r"max_batch_size=2\.5: a whole number"),
    ({"max_queue": 0}, r"max_queue=0: a whole number from 1 to 16,777,216"),
    ({"max_wait_s": float("nan")}, r"max_wait_s=nan: seconds, from 0 to 60"),
    ({"max_wait_s": -1}, r"max_wait_s=-1: seconds"),
    ({"inline_below_s": float("inf")}, r"inline_below_s=inf: seconds"),
    ({"part_s": 0}, r"part_s=0: seconds, from more than 0 to 60"),
], ids=["batch-0", "batch-fraction", "queue-0", "wait-nan", "wait-negative", "inline-inf", "part-0"])
def test_a_batching_rule_from_python_is_checked_like_the_command_line(settings, message):
    with pytest.raises(ConfigError, match=f"^{message}"):
        Batcher(lambda items: items, lambda rows: (200, b"ok"), **settings)
