"""One timing rule for every speed table: blocks of calls, interleaved, each after a pause, so that no
runtime's spinning threads slow the calls of the one timed after it."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from torchwork.deploy import export, verify
from torchwork.deploy.verification import SETTLE_S, interleaved_samples


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10)).eval()


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory):
    model = _model()
    out = tmp_path_factory.mktemp("timing") / "mlp"
    export(model, torch.randn(4, 256), out, formats=("onnx",), verify_rounds=5, threads=2)
    return model, out


def test_each_block_follows_a_pause_and_every_call_follows_every_other() -> None:
    """The rule itself, from when each call ran: the speed figure it protects (eager, ONNX Runtime, eager again
    give the same eager figure) is a timing, so it lives in benchmarks/deploy_timing_rule.py."""
    log: list[tuple[str, float, float]] = []

    def call(name: str):
        def run() -> None:
            started = time.perf_counter()
            sum(range(2000))
            log.append((name, started, time.perf_counter()))
        return run

    names = ["eager", "onnx", "eager again"]
    seconds = interleaved_samples({name: call(name) for name in names}, rounds=6, repeat=3, warmup=1, settle_s=0.02)
    assert {name: len(values) for name, values in seconds.items()} == dict.fromkeys(names, 6)
    timed = log[len(names):]  # after one warm-up call of each
    blocks = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    assert all(len({name for name, _, _ in block}) == 1 for block in blocks)  # a block: repeat calls of one
    pauses = [after[0][1] - before[-1][2] for before, after in zip(blocks, blocks[1:])]
    assert min(pauses) >= 0.02  # the spinning threads of the block before have had their pause
    follows = {(before[0][0], after[0][0]) for before, after in zip(blocks, blocks[1:])}
    assert follows == {(a, b) for a in names for b in names if a != b}  # no runtime always times after another
    for name in names:  # each sample is its block's seconds per call
        block_seconds = [(block[-1][2] - block[0][1]) / 3 for block in blocks if block[0][0] == name]
        assert all(sample >= 0.98 * inner for sample, inner in zip(seconds[name], block_seconds))


def test_a_block_of_long_calls_ends_once_it_has_lasted_block_s() -> None:
    """A call that takes most of a second (a transformer's eager batch of 64) is timed well alone: its block
    ends after the call that brings it to block_s; short calls still fill their blocks."""
    calls = {"long": 0, "short": 0}

    def run(name: str, seconds: float):
        def call() -> None:
            calls[name] += 1
            time.sleep(seconds)
        return call

    seconds = interleaved_samples({"long": run("long", 0.03), "short": run("short", 0.001)}, rounds=3, repeat=4,
                                  warmup=1, settle_s=0, block_s=0.02)
    assert calls == {"long": 1 + 3, "short": 1 + 3 * 4}  # the warm-up call, then 1 (long) or 4 (short) a block
    assert min(seconds["long"]) >= 0.03 and max(seconds["short"]) < 0.03


def test_verify_times_by_that_rule_and_says_so(artifact) -> None:
    model, out = artifact
    report = verify(out, model=model, rounds=5, threads=2)
    assert f"each block {SETTLE_S} s after the previous one" in report["timing_rule"]
    assert {"eager", "onnx"} <= set(report["variants"])
