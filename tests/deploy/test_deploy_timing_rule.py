"""One timing rule for every speed table: blocks of calls, interleaved, each after a pause, so that no
runtime's spinning threads slow the calls of the one timed after it. Eager, then ONNX Runtime, then eager
again must give the same eager figure."""

from __future__ import annotations

import statistics

import pytest
import torch
from torch import nn

from torchwork.deploy import export, load_artifact, verify
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


def test_eager_then_onnx_then_eager_give_the_same_eager_figure(artifact) -> None:
    model, out = artifact
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        onnx = load_artifact(out, "onnx", threads=2)
        x = torch.randn(16, 256)

        def eager() -> None:
            with torch.inference_mode():
                model(x)

        seconds = interleaved_samples({"eager": eager, "onnx": lambda: onnx.run((x,)), "eager again": eager},
                                      rounds=15, repeat=4, settle_s=SETTLE_S)
    finally:
        torch.set_num_threads(previous)
    # Per round (the two eager blocks a second apart see the same load), then the median over rounds: on a
    # machine whose load moves within seconds, medians taken apart would differ by the load, not the rule.
    # "eager again" follows ONNX Runtime in two rounds of three, "eager" in one.
    ratio = statistics.median(b / a for a, b in zip(seconds["eager"], seconds["eager again"]))
    assert 1 / 1.15 <= ratio <= 1.15, (ratio, seconds)


def test_verify_times_by_that_rule_and_says_so(artifact) -> None:
    model, out = artifact
    report = verify(out, model=model, rounds=5, threads=2)
    assert f"each block {SETTLE_S} s after the previous one" in report["timing_rule"]
    assert {"eager", "onnx"} <= set(report["variants"])
