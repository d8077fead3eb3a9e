"""Threads on a busy machine: threads="auto" against every fixed count, beside a CPU-bound neighbour.

Three real workloads, each timed in this process in interleaved rounds (every round a block of steps at
each fixed thread count and at auto's choice, in a rotating order, each block after the verification's
pause), so that the machine's load moves all of them alike:
- ``transformer``: a training step of a 2-layer, 384-wide encoder (MiniLM's top-2 shape: 6 heads, FFN 1536;
  batch 32, 40 tokens) with AdamW;
- ``ngram``: a training step of the quickstart's TF-IDF n-gram model on a batch of 256 real tweets;
- ``int8_serving``: ONNX Runtime INT8 (torchwork.deploy.export, quantize="int8") of the encoder as a
  classifier, batch 32 (ONNX Runtime's threads are fixed per session: one session per count).

``busy``: beside a neighbour process spinning on one core for the whole section (started and stopped
here); goal: auto >= 0.95x of the best fixed count. ``quiet``: no neighbour of ours; goal auto >= 0.97x of
all cores. Both report the load average and the CPU others used (torchwork.threads.busy_cpus), because a
shared machine is never quiet. ``wait_policy``: the transformer step beside the neighbour in child
processes with OMP_WAIT_POLICY=PASSIVE and unset (libgomp reads it once, at start), alternated.

Prints one JSON object; ``--quick`` runs fewer rounds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from neighbour import neighbour  # benchmarks/neighbour.py: one core kept busy
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn

from torchwork.deploy.verification import SETTLE_S
from torchwork.threads import ThreadTuner, busy_cpus, set_threads, usable_cpus


def encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(384, 6, 1536, batch_first=True, dropout=0.0)
    return nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), Pool(), nn.Linear(384, 3))


class Pool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


def transformer_step() -> Callable[[int], Any]:
    model = encoder()
    optimizer = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(32, 40, 384), torch.randint(0, 3, (32,))
    loss_fn = nn.CrossEntropyLoss()

    def step(threads: int) -> None:
        set_threads(threads)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
    return step


def ngram_step() -> Callable[[int], Any]:
    from torchwork.data import TextPreprocessor, load_dataset, loader
    from torchwork.engine.batches import call_model
    from torchwork.recipes.models import TfidfNGramClassifier

    train = load_dataset("tweets", seed=0).train
    preprocessor = TextPreprocessor.fit(train.texts, max_vocab=50_000, max_length=64)
    inputs, targets = next(iter(loader(train, 256, shuffle=True, seed=0, num_workers=0, preprocessor=preprocessor,
                                       device="cpu")))
    model = TfidfNGramClassifier(list(preprocessor.vocab), 13)
    model.fit_idf(preprocessor(train.texts[:2000])[0])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
    loss_fn = nn.CrossEntropyLoss()

    def step(threads: int) -> None:
        set_threads(threads)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(call_model(model, inputs), targets).backward()
        optimizer.step()
    return step


def int8_serving(directory: Path) -> Callable[[int], Any]:
    from torchwork.deploy import export, load_artifact

    model = encoder().eval()
    x = torch.randn(32, 40, 384)
    export(model, x[:4], directory / "encoder", formats=("onnx",), quantize="int8", verify_rounds=5, threads=1)
    sessions = {t: load_artifact(directory / "encoder", "onnx-int8", threads=t) for t in range(1, usable_cpus() + 1)}

    def step(threads: int) -> None:
        sessions[threads].run((x,))
    return step


def auto_choice(step: Callable[[int], Any]) -> tuple[int, str]:
    """What threads="auto" picks for this step now: the Trainer's tuner, fed this step's real calls."""
    tuner = ThreadTuner()
    while tuner.measuring:
        threads = tuner.upcoming
        started = time.perf_counter()
        step(threads)
        tuner.after_step(time.perf_counter() - started, 1)
    return tuner.choice.threads, tuner.choice.reason


def compare(step: Callable[[int], Any], rounds: int, block: int, block_s: float = 0.3) -> dict[str, Any]:
    """``block`` steps per block at least, and as many more as take ``block_s``: two blocks of the very
    same count, 80 ms each, differed by up to 12% here, more than the margins of the goals."""
    chosen, reason = auto_choice(step)
    configs = {f"fixed_{t}": t for t in range(1, usable_cpus() + 1)} | {"auto": chosen}
    slowest = 0.0
    for threads in configs.values():  # warm-up, and how long a step takes
        started = time.perf_counter()
        step(threads)
        slowest = max(slowest, time.perf_counter() - started)
    block = max(block, math.ceil(block_s / max(slowest, 1e-6)))
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    # Every order of the configurations in turn, so each follows each other equally often: a block right
    # after a 2-thread block ran slower beside the neighbour (OpenMP's second thread still spinning), which
    # a plain rotation gave to auto twice as often as to the fixed count it chose.
    orders = list(itertools.permutations(configs))
    for r in range(rounds):
        for name in orders[r % len(orders)]:
            time.sleep(SETTLE_S)
            started = time.perf_counter()
            for _ in range(block):
                step(configs[name])
            seconds[name].append((time.perf_counter() - started) / block)
    median = {name: statistics.median(v) for name, v in seconds.items()}
    fixed = {name: m for name, m in median.items() if name != "auto"}
    best = min(fixed, key=fixed.__getitem__)
    return {"auto_threads": chosen, "auto_reason": reason, "block": block,
            "step_ms": {name: round(1e3 * m, 2) for name, m in median.items()}, "best_fixed": best,
            # when auto runs the best fixed count, its ratio to it is the noise between identical blocks
            "auto_same_as_best": configs[best] == chosen,
            "auto_vs_best": round(fixed[best] / median["auto"], 3),
            "auto_vs_all_cores": round(fixed[f"fixed_{usable_cpus()}"] / median["auto"], 3)}


def section(steps: dict[str, Callable[[int], Any]], rounds: int, block: int) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    others = busy_cpus(0.5)
    figures = {name: compare(step, rounds, block) for name, step in steps.items()}
    return {"load_1min": round(load_before, 1), "others_cpus_at_start": round(others, 2), **figures}


def wait_policy(rounds: int) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"passive": [], "default": []}
    for r in range(2 * rounds):
        policy = ("passive", "default")[r % 2]
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        done = subprocess.run([sys.executable, __file__, "--child-policy"], env=env, capture_output=True, text=True,
                              check=True, timeout=600)
        results[policy].append(json.loads(done.stdout.strip().splitlines()[-1]))
    out: dict[str, Any] = {}
    for policy, runs in results.items():
        out[policy] = {key: round(statistics.median(run[key] for run in runs), 2) for key in runs[0]}
    for key in out["default"]:
        out[f"passive_speedup_{key}"] = round(out["default"][key] / out["passive"][key], 3)
    return out


def child_policy() -> None:
    step = transformer_step()
    step(1)
    figures = {}
    for threads in (usable_cpus(), 1):
        step(threads)
        started = time.perf_counter()
        for _ in range(3):
            step(threads)
        figures[f"step_ms_{threads}_threads"] = 1e3 * (time.perf_counter() - started) / 3
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--child-policy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_policy:
        child_policy()
        return
    rounds, block = (3, 2) if args.quick else (12, 3)  # 12: each order of three configurations twice
    with tempfile.TemporaryDirectory() as tmp:
        steps = {"transformer": transformer_step(), "ngram": ngram_step(), "int8_serving": int8_serving(Path(tmp))}
        figures: dict[str, Any] = {"usable_cpus": usable_cpus(), "rounds": rounds, "block": block}
        with neighbour():
            figures["busy"] = section(steps, rounds, block)
            figures["wait_policy"] = wait_policy(2 if args.quick else 3)
        figures["quiet"] = section(steps, rounds, block)
    goals = {"busy_auto_vs_best_ge_0.95": all(figures["busy"][n]["auto_vs_best"] >= 0.95 for n in steps),
             "quiet_auto_vs_all_cores_ge_0.97": all(figures["quiet"][n]["auto_vs_all_cores"] >= 0.97 for n in steps)}
    record({**figures, "goals_met": goals})


if __name__ == "__main__":
    main()
