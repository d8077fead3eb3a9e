"""Engine overhead: a hand-written loop vs torchwork.Trainer on the same small MLP.

Small MLP on synthetic data (20k x 64 features, batch 64, 3 epochs, 1 thread), both in this process.
Prints one JSON object:
- calls_per_step: Python function calls per optimizer step (deterministic, counted with sys.setprofile),
  DataLoader, model, loss and optimizer included, for both loops, and their ratio (goal <= 1.10);
- cpu_time_ratio: median over interleaved rounds of Trainer CPU time / hand-loop CPU time (goal <= 1.05);
- instructions_ratio (``--callgrind``): instructions executed by the Trainer's loop / the hand loop's, counted
  by valgrind's callgrind (Debian's valgrind), a figure the machine's load cannot move. Each loop runs in its
  own process under callgrind, after a warm-up run; only the measured loop is collected (it is called
  through ctypes, and collection toggles on entering and leaving libffi's ``ffi_call``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer

torch.set_num_threads(1)
N, FEATURES, CLASSES, BATCH, EPOCHS, ROUNDS = 20_000, 64, 10, 64, 3, 5


def setup(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    dataset = TensorDataset(torch.randn(N, FEATURES, generator=g), torch.randint(0, CLASSES, (N,), generator=g))
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, CLASSES))
    return loader, model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.CrossEntropyLoss()


def hand_loop(epochs: int = EPOCHS) -> int:
    loader, model, optimizer, loss_fn = setup()
    steps = 0
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
    return steps


def trainer_loop(epochs: int = EPOCHS) -> int:
    loader, model, optimizer, loss_fn = setup()
    trainer = Trainer(model, optimizer, loss_fn, device="cpu", progress=False, threads=1)  # as the hand loop
    trainer.fit(loader, epochs=epochs)
    return trainer.global_step


def count_calls(fn) -> tuple[int, int]:
    calls = 0

    def profiler(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profiler)
    try:
        steps = fn(1)
    finally:
        sys.setprofile(None)
    return calls, steps


def cpu_seconds(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> dict:
    hand_loop(1), trainer_loop(1)  # warm-up: first calls import and initialise lazily; count after them
    hand_calls, hand_steps = count_calls(hand_loop)
    trainer_calls, trainer_steps = count_calls(trainer_loop)
    ratios, hand_times, trainer_times = [], [], []
    for round_index in range(ROUNDS):
        # alternate who goes first, so drift in machine load hits both sides alike
        if round_index % 2:
            t, h = cpu_seconds(trainer_loop), cpu_seconds(hand_loop)
        else:
            h, t = cpu_seconds(hand_loop), cpu_seconds(trainer_loop)
        hand_times.append(h)
        trainer_times.append(t)
        ratios.append(t / h)
    result = {
        "workload": f"MLP {FEATURES}-128-128-{CLASSES}, {N} samples, batch {BATCH}, {EPOCHS} epochs, 1 thread",
        "steps_per_run": hand_steps * EPOCHS,
        "calls_per_step": {"hand": round(hand_calls / hand_steps, 1),
                           "trainer": round(trainer_calls / trainer_steps, 1)},
        "calls_ratio": round((trainer_calls / trainer_steps) / (hand_calls / hand_steps), 4),
        "cpu_seconds_median": {"hand": round(statistics.median(hand_times), 3),
                               "trainer": round(statistics.median(trainer_times), 3)},
        "cpu_time_ratio": round(statistics.median(ratios), 4),
        "rounds": ROUNDS,
        "goals": {"calls_ratio": 1.10, "cpu_time_ratio": 1.05},
    }
    result["meets_goals"] = result["calls_ratio"] <= 1.10 and result["cpu_time_ratio"] <= 1.05
    return result


CALLGRIND_SAMPLES = 4_096  # 64 steps: instructions per step hardly move with more, callgrind is ~50x slower


def callgrind_child(loop: str) -> None:
    global N
    N = CALLGRIND_SAMPLES
    run = {"hand": hand_loop, "trainer": trainer_loop}[loop]
    run(1)  # warm-up, not collected
    steps = []
    ctypes.CFUNCTYPE(None)(lambda: steps.append(run(1)))()  # collected: only inside ffi_call
    print(steps[0])


def instructions(loop: str) -> tuple[int, int]:
    """(instructions of one epoch of ``loop``, its steps), from callgrind's totals."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        done = subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=ffi_call*",
                               f"--callgrind-out-file={out}", sys.executable, __file__, "--callgrind-child", loop],
                              capture_output=True, text=True, check=True, timeout=3600)
        totals = re.search(r"^(?:totals|summary): (\d+)", open(out).read(), re.MULTILINE)
        assert totals, "callgrind wrote no totals"
        return int(totals.group(1)), int(done.stdout.strip().splitlines()[-1])


def callgrind_figures() -> dict:
    if shutil.which("valgrind") is None:
        return {"instructions_ratio": None, "why": "valgrind is not installed (Debian: apt-get install valgrind)"}
    (hand, hand_steps), (trainer, trainer_steps) = instructions("hand"), instructions("trainer")
    return {"instructions_per_step": {"hand": hand // hand_steps, "trainer": trainer // trainer_steps},
            "instructions_ratio": round((trainer / trainer_steps) / (hand / hand_steps), 4),
            "instructions_samples": CALLGRIND_SAMPLES}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callgrind", action="store_true", help="also count instructions under callgrind")
    parser.add_argument("--callgrind-child", choices=("hand", "trainer"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.callgrind_child:
        callgrind_child(args.callgrind_child)
    else:
        figures = main()
        if args.callgrind:
            figures.update(callgrind_figures())
            figures["meets_goals"] = figures["meets_goals"] if figures.get("instructions_ratio") is None else (
                figures["calls_ratio"] <= 1.10 and figures["instructions_ratio"] <= 1.05)
        record(figures, indent=2)
