"""The runtime doctor's cost against the width of a model: a fixed cost per torch call, not per element.

The doctor watches every call of the torch API from Python (a ``TorchFunctionMode``, module and
saved-tensor hooks, the checks' reads), so it adds about the same microseconds to a call whatever the size
of its tensors. On the tiny models a CPU benchmark trains that can double the time; on a model whose calls
each take longer, the same microseconds fade. This runs one training step of a 2-layer Transformer encoder
(batch 8 x 32 tokens, AdamW) at several widths, plain and inside ``diagnose()`` (every check on), and prints
per width: the CPU seconds of a plain step, the ratio, the torch calls of one step (counted by a mode that
only counts) and the microseconds the doctor adds to each call. CPU time on 1 thread, the variants
alternated and each one's fastest repeat kept (the machine is shared).

Run: ``python benchmarks/doctor_width.py [--repeats 5] [--widths 64 256 1024]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
from doctor_overhead import best_of
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from torchwork.doctor.session import diagnose

PLAIN_SECONDS = 0.5  # CPU time a plain repeat aims at: enough steps to swamp the clock's grain


class CallCounter(TorchFunctionMode):
    """Counts the torch API calls made while it is active, and nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def training_step(width: int) -> Callable[[], None]:
    """One correct training step of a 2-layer Transformer encoder ``width`` wide, as a closure."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=2 * width, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False))
    head = nn.Linear(width, 10)
    optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-3)
    tokens, labels = torch.randn(8, 32, width), torch.randint(0, 10, (8,))

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(head(model(tokens).mean(dim=1)), labels)
        loss.backward()
        optimizer.step()
    return step


def run_steps(step: Callable[[], None], steps: int, doctor: bool) -> float:
    """CPU seconds of ``steps`` steps, inside ``diagnose()`` or not."""
    started = time.process_time()
    if doctor:
        with diagnose() as session:
            for _ in range(steps):
                step()
        assert not session.internal_errors, session.internal_errors
        assert not session.findings, [f.id for f in session.findings]  # a correct loop: nothing to say
    else:
        for _ in range(steps):
            step()
    return time.process_time() - started


def one_width(width: int, repeats: int) -> dict[str, Any]:
    step = training_step(width)
    step()  # warm-up: kernels, optimizer state
    with CallCounter() as counter:
        step()
    single = min(run_steps(step, 1, False) for _ in range(3))
    steps = max(3, min(200, round(PLAIN_SECONDS / max(single, 1e-4))))
    run_steps(step, 1, True)  # the doctor's own first-use costs (imports, caches) are not a step's
    best = best_of(repeats, {"plain": lambda: run_steps(step, steps, False),
                             "doctor": lambda: run_steps(step, steps, True)})
    per_step = {name: seconds / steps for name, seconds in best.items()}
    return {"plain_cpu_s_per_step": round(per_step["plain"], 5), "steps": steps,
            "doctor_x": round(per_step["doctor"] / per_step["plain"], 2), "calls_per_step": counter.calls,
            "added_us_per_call": round(1e6 * (per_step["doctor"] - per_step["plain"]) / counter.calls, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256, 1024])
    args = parser.parse_args()
    if args.repeats < 1 or any(w < 4 or w % 4 for w in args.widths):
        parser.error("--repeats must be >= 1 and each width a multiple of 4 (4 attention heads)")
    torch.set_num_threads(1)
    widths = {str(width): one_width(width, args.repeats) for width in args.widths}
    record({"threads": 1, "batch": [8, 32], "layers": 2, "repeats": args.repeats, "widths": widths})


if __name__ == "__main__":
    main()
