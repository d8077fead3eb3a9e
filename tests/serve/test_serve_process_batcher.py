"""The ProcessBatcher: batches formed on the event loop, run in a real spawned model process.

Every test starts a real child process (``ModelProcess``) and drives the batcher on a real event loop; the
crash test kills the child for real.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import numpy as np
import psutil
import pytest
from serve_models import refusing_predictor, slow_predictor

from torchwork.errors import ConfigError
from torchwork.serve import ModelProcess
from torchwork.serve.encoding import answer, prediction_fragments
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.process_batcher import ProcessBatcher

LOCAL = refusing_predictor("")  # the same weights as the child's (seeded)
FRAGMENTS = prediction_fragments(None)


def local_run(items):
    return FRAGMENTS(LOCAL.predict_batch(items))


@pytest.fixture()
def process() -> Iterator[ModelProcess]:
    model = ModelProcess(refusing_predictor, "", threads=1)
    model.start(warm_up=[1, 8])
    yield model
    model.close()


def batcher_for(process: ModelProcess, **options) -> ProcessBatcher:
    batcher = ProcessBatcher(process, answer, run_inline=local_run, max_batch_size=8,
                             pack=lambda items: np.asarray(items, dtype=np.float32), **options)
    batcher.metrics = ServerMetrics(8, lambda: 0, lambda: 0)
    return batcher


def outputs(body: bytes) -> np.ndarray:
    return np.array([p["output"] for p in json.loads(body)["predictions"]])


def test_concurrent_requests_run_in_batches_in_the_child_and_answer_in_order(process):
    batcher = batcher_for(process)
    requests = [[[float(i), 1.0, 2.0, 3.0]] * (1 + i % 3) for i in range(20)]
    requests.append([[0.5, 1.0, 2.0, 3.0]] * 11)  # more items than a batch holds: the child runs it in chunks

    async def main():
        await batcher.open()
        answers = await asyncio.gather(*(batcher.submit(r) for r in requests))
        await batcher.shutdown()
        return answers

    answers = asyncio.run(main())
    for request, (status, body) in zip(requests, answers):
        assert status == 200
        np.testing.assert_allclose(outputs(body), LOCAL.predict_batch(request), atol=1e-6)
    sizes = batcher.metrics.batch_size
    assert sizes.sum == sum(len(r) for r in requests)
    assert sizes.count < len(requests)  # batched: fewer model calls than requests
    assert sizes.counts[-2] > 0  # some batches held 5 to 8 items: they fill up to the limit
    assert process.pid is None  # shutdown ended the child


def test_a_failing_request_does_not_fail_its_batch_neighbours(process):
    batcher = batcher_for(process)
    good, bad = [[1.0, 2.0, 3.0, 4.0]], [[-1.0, 2.0, 3.0, 4.0]]

    async def main():
        await batcher.open()
        answers = await asyncio.gather(batcher.submit(good), batcher.submit(bad), batcher.submit(good * 2))
        assert batcher.queued_items == 0  # the retries are not counted twice
        await batcher.shutdown()
        return answers

    (s1, b1), (s2, b2), (s3, b3) = asyncio.run(main())
    assert (s1, s3) == (200, 200) and s2 == 500
    assert "refuses a negative first number" in json.loads(b2)["detail"]
    np.testing.assert_allclose(outputs(b3), LOCAL.predict_batch(good * 2), atol=1e-6)


def test_a_child_killed_mid_batch_answers_500_and_a_new_child_serves():
    process = ModelProcess(slow_predictor, "", threads=1)
    process.start()
    batcher = ProcessBatcher(process, answer, run_inline=FRAGMENTS, max_batch_size=8)
    first_pid = process.pid

    async def main():
        await batcher.open()
        in_flight = asyncio.ensure_future(batcher.submit([[3.0, 0, 0, 0]]))  # the child sleeps 3 s on it
        await asyncio.sleep(0.5)
        os.kill(first_pid, signal.SIGKILL)
        died = await in_flight
        after = await asyncio.wait_for(batcher.submit([[0.0, 1, 2, 3]]), 120)  # queues until the new child
        second_pid = process.pid
        await batcher.shutdown()
        return died, after, second_pid

    try:
        (status, body), after, second_pid = asyncio.run(main())
    finally:
        process.close()
    assert status == 500 and "model process died" in json.loads(body)["detail"]
    assert after[0] == 200
    assert second_pid not in (None, first_pid)


def test_shutdown_answers_everything_queued_then_ends_the_child():
    process = ModelProcess(slow_predictor, "", threads=1)
    process.start()
    pid = process.pid
    batcher = ProcessBatcher(process, answer, run_inline=FRAGMENTS, max_batch_size=2)

    async def main():
        await batcher.open()
        jobs = [asyncio.ensure_future(batcher.submit([[0.2, 0, 0, i]])) for i in range(6)]
        await asyncio.sleep(0.05)  # the first batch is running, the rest queue
        started = time.monotonic()
        await batcher.shutdown(timeout=30)
        return [await job for job in jobs], time.monotonic() - started

    try:
        answers, took = asyncio.run(main())
    finally:
        process.close()
    assert [status for status, _ in answers] == [200] * 6
    assert took >= 0.4  # it waited for the queued batches (0.2 s each), not cut them off
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_model_process_runs_at_a_lower_cpu_priority_than_the_server(process):
    assert psutil.Process(process.pid).nice() == min(19, os.nice(0) + 10)
    with pytest.raises(ConfigError, match="niceness must be 0"):
        ModelProcess(refusing_predictor, "", nice=20)


def test_a_process_batcher_is_opened_and_shut_down_on_the_loop(process):
    batcher = batcher_for(process)
    # It is no thread batcher with half its methods disabled: only the loop's open() and shutdown() exist.
    assert not hasattr(batcher, "start") and not hasattr(batcher, "stop")
    assert asyncio.iscoroutinefunction(batcher.open) and asyncio.iscoroutinefunction(batcher.shutdown)
