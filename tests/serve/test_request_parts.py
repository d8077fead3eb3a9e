"""serve/request_parts.py and BatchingRule.parts: a large request runs in parts, and a light request that
arrives while a part runs goes to the model before the large request's next part (issue 49, item 12)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from torchwork.errors import QueueFullError
from torchwork.serve import Batcher
from torchwork.serve.batching import BatchingRule, Job
from torchwork.serve.request_parts import PartedJob


def encode(rows):
    return 200, json.dumps(list(rows)).encode()


def run_async(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_a_light_request_runs_before_the_next_part_of_a_large_one():
    first_part_running, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def model(items):
        if not seen:  # hold the large request's first part until the light request is queued
            first_part_running.set()
            release.wait(5)
        seen.append(list(items))
        return [x * 10 for x in items]

    batcher = Batcher(model, encode, max_batch_size=4, max_wait_s=0)

    async def main():
        batcher.start(asyncio.get_running_loop())
        large = batcher.submit(list(range(12)))
        assert isinstance(large, PartedJob)
        await asyncio.get_running_loop().run_in_executor(None, first_part_running.wait, 5)
        light = batcher.submit([99])
        release.set()
        answers = await asyncio.gather(large, light)
        batcher.stop()
        return answers

    large_answer, light_answer = run_async(main())
    assert large_answer == encode([x * 10 for x in range(12)])  # one answer, all rows in order
    assert light_answer == encode([990])
    assert seen[0] == [0, 1, 2, 3] and seen[1] == [99]  # before the large request's second part
    assert [x for batch in seen for x in batch if x != 99] == list(range(12))
    assert batcher.queued_items == 0


def test_parts_follow_the_work_the_model_was_measured_to_do():
    rule = BatchingRule(len, encode, max_batch_size=32, part_s=0.01,
                        cost=lambda items: sum(len(text) for text in items))
    texts = ["x" * 900] * 6 + ["y"]
    assert rule.parts(texts) == [slice(0, 7)]  # speed unknown: only max_batch_size splits
    loop = asyncio.new_event_loop()
    try:
        rule.observe([Job(["z" * 500], loop.create_future())], 1, 0.005)
    finally:
        loop.close()
    # 500 units in 5 ms: a part holds 1,000 units (10 ms), so each long text is a part of its own
    assert rule.parts(texts) == [slice(i, i + 1) for i in range(5)] + [slice(5, 7)]
    assert rule.parts(["y"] * 20) == [slice(0, 20)]  # light requests are never split
    assert rule.parts([]) == [slice(0, 0)]


def test_a_failing_part_ends_the_request_with_its_error_and_runs_no_more_parts():
    seen: list[list[int]] = []

    def model(items):
        seen.append(list(items))
        if 5 in items:
            raise ValueError("cannot take 5")
        return list(items)

    batcher = Batcher(model, encode, max_batch_size=4)

    async def main():
        batcher.start(asyncio.get_running_loop())
        answer = await batcher.submit(list(range(12)))
        batcher.stop()
        return answer

    status, body = run_async(main())
    assert status == 500 and "cannot take 5" in json.loads(body)["detail"]
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7]]  # the third part never ran
    assert batcher.queued_items == 0


def test_a_cancelled_large_request_queues_no_more_parts_and_is_admitted_whole():
    release = threading.Event()
    seen: list[list[int]] = []

    def model(items):
        release.wait(5)
        seen.append(list(items))
        return list(items)

    batcher = Batcher(model, encode, max_batch_size=4, max_queue=12)

    async def main():
        batcher.start(asyncio.get_running_loop())
        large = batcher.submit(list(range(12)))
        with pytest.raises(QueueFullError):  # the large request's 12 items count, not only its first part's
            batcher.submit([100])
        large.cancel()
        large.future.set_result((504, b"late"))  # what a deadline does
        release.set()
        answer = await large
        await asyncio.sleep(0.05)
        batcher.stop()
        return answer

    assert run_async(main()) == (504, b"late")
    assert seen in ([], [[0, 1, 2, 3]])  # at most the part already taken by the model
    assert batcher.queued_items == 0  # the parts never queued do not count as waiting
