"""The timing rule's own check: eager, then ONNX Runtime, then eager again give the same eager figure.

torchwork times every speed table in interleaved blocks, each after a pause (deploy.verification), so that
ONNX Runtime's spinning threads do not slow the block timed after it. Here an MLP of 256-1024-1024-10 at
batch 16, 2 threads: per round, the ratio of "eager again" (which follows ONNX Runtime in two rounds of
three) to "eager" (in one), then the median over the rounds and their spread (quartiles). The rule holds
when the median is near 1 against that spread. Prints one JSON object.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn

from torchwork.deploy import export, load_artifact
from torchwork.deploy.verification import SETTLE_S, interleaved_samples

ROUNDS = 30


def main() -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 10)).eval()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "mlp"
        export(model, torch.randn(4, 256), out, formats=("onnx",), verify_rounds=3, threads=2)
        onnx = load_artifact(out, "onnx", threads=2)
        x = torch.randn(16, 256)

        def eager() -> None:
            with torch.inference_mode():
                model(x)

        seconds = interleaved_samples({"eager": eager, "onnx": lambda: onnx.run((x,)), "eager again": eager},
                                      rounds=ROUNDS, repeat=4, settle_s=SETTLE_S)
    ratios = sorted(b / a for a, b in zip(seconds["eager"], seconds["eager again"]))
    quartiles = statistics.quantiles(ratios, n=4)
    return {"benchmark": "deploy_timing_rule", "rounds": ROUNDS, "settle_s": SETTLE_S,
            "eager_again_over_eager_median": round(statistics.median(ratios), 3),
            "quartiles": [round(q, 3) for q in (quartiles[0], quartiles[2])],
            "eager_ms_median": round(1e3 * statistics.median(seconds["eager"]), 3),
            "onnx_ms_median": round(1e3 * statistics.median(seconds["onnx"]), 3)}


if __name__ == "__main__":
    record(main())
