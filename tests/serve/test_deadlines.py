"""serve/deadlines.py: a request the model has not answered within the timeout is answered 504, once."""

from __future__ import annotations

import asyncio
import json

from torchwork.serve.batching import Job
from torchwork.serve.deadlines import Deadlines, expire


def test_an_unanswered_job_is_answered_504_and_cancelled():
    async def scenario():
        job = Job([1], asyncio.get_running_loop().create_future())
        Deadlines(0.02, every_s=0.01).add(job)
        return job, await job.future

    job, (status, body) = asyncio.run(scenario())
    assert status == 504 and job.cancelled
    assert "--timeout-s" in json.loads(body)["detail"]


def test_a_job_answered_in_time_keeps_its_answer_and_the_sweeps_stop():
    async def scenario():
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(60.0, every_s=0.01)
        job = Job([1], loop.create_future())
        deadlines.add(job)
        job.future.set_result((200, b"{}"))
        await asyncio.sleep(0.05)  # a few sweeps: the answered job leaves the watch, and sweeping stops
        return job, deadlines._sweeping

    job, sweeping = asyncio.run(scenario())
    assert job.future.result() == (200, b"{}") and not job.cancelled and not sweeping


def test_expire_leaves_an_answered_job_alone():
    async def scenario():
        job = Job([1], asyncio.get_running_loop().create_future())
        job.future.set_result((200, b"ok"))
        expire(job, 1.0)
        return job

    job = asyncio.run(scenario())
    assert job.future.result() == (200, b"ok") and not job.cancelled
