"""What threads="auto" costs on short and long runs: whole Trainer.fit runs of 10 and 500 steps, auto against
threads=1, beside a CPU-bound neighbour (benchmarks/neighbour.py) and without one of ours.

Issue 49, item 11: beside a busy neighbour a 10-step run with the default threads took 0.617 s a step
against 0.369 s with threads=1 (the count it chose), because timing the candidate counts filled most of the
run. The timing now takes at most 5% of the planned steps and stops once the answer is clear, so a 10-step
run times nothing and a 500-step run at most 25 steps.

Each configuration runs ``--repeats`` times, interleaved (auto, 1, 1, auto, ...), in this process; the
figure is the median seconds per step of a whole fit (the step, the loop, the batch's fetch, the timing),
and ``auto_extra_s_per_run`` what auto cost a run more than threads=1 (its 0.1 s reading of the neighbours'
CPU at the start, less what the fit's setup covered, and the timing).
The machine is shared: read the ratios (auto / threads=1), not the absolute times. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from neighbour import neighbour  # benchmarks/neighbour.py: one core kept busy
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn

from torchwork import Trainer
from torchwork.threads import usable_cpus


def batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(256, 512, generator=generator), torch.randint(0, 4, (256,), generator=generator))
            for _ in range(count)]


def one_run(steps: int, threads: Any) -> dict[str, Any]:
    """A whole fit of ``steps`` steps (10 batches an epoch): seconds per step, and what auto chose."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 4))  # tens of ms a step
    trainer = Trainer(model, torch.optim.AdamW(model.parameters()), nn.CrossEntropyLoss(), device="cpu",
                      progress=False, guard=False, threads=threads)
    data = batches(10)
    started = time.perf_counter()
    trainer.fit(data, epochs=steps // 10)
    seconds = (time.perf_counter() - started) / steps
    tuner = trainer.cpu_threads.tuner
    choice = trainer.thread_choice
    return {"step_s": seconds, "chose": choice.threads if choice is not None else None,
            "timed_steps": tuner.timed_steps if tuner is not None else 0}


def section(repeats: int) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for steps in (10, 500):
        runs: dict[str, list[dict[str, Any]]] = {"auto": [], "threads_1": []}
        for r in range(repeats):
            order = ("auto", "threads_1") if r % 2 == 0 else ("threads_1", "auto")
            for name in order:
                runs[name].append(one_run(steps, "auto" if name == "auto" else 1))
        auto_s = statistics.median(run["step_s"] for run in runs["auto"])
        one_s = statistics.median(run["step_s"] for run in runs["threads_1"])
        figures[f"steps_{steps}"] = {
            "auto_step_ms": round(1e3 * auto_s, 2), "threads_1_step_ms": round(1e3 * one_s, 2),
            "auto_vs_threads_1": round(auto_s / one_s, 3),
            "auto_extra_s_per_run": round((auto_s - one_s) * steps, 3),  # the reading and the timing
            "auto_chose": [run["chose"] for run in runs["auto"]],
            "auto_timed_steps": [run["timed_steps"] for run in runs["auto"]],
            "timed_share_max": round(max(run["timed_steps"] for run in runs["auto"]) / steps, 3)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each configuration (default 3)")
    args = parser.parse_args()
    one_run(10, 1)  # warm-up: first calls, allocations
    figures: dict[str, Any] = {"usable_cpus": usable_cpus(), "repeats": args.repeats}
    with neighbour():
        figures["busy"] = section(args.repeats)
    figures["quiet"] = section(args.repeats)
    record(figures)


if __name__ == "__main__":
    main()
