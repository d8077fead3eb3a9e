"""CPU cost of the doctor: guard mode on the engine's training step, and the full doctor on a plain loop.

Prints one JSON object. Every figure is CPU time (process_time) measured on 1 thread, as a ratio against
a baseline measured in the same run, alternating the variants and keeping each one's fastest repeat
(the machine is shared and noisy).

* guard: the engine's Trainer.step on each batch, with and without ``guard.after_step`` (or, once the
  engine has it, ``Trainer(guard=...)``): an MLP (20k x 64 features, batch 64) and a small CNN.
  Goals: <= 5% on the MLP, <= 2% on the CNN. Besides the on/off difference (within the machine's noise
  at these sizes) the CPU time spent inside the guard itself is clocked: ``guard_share_pct``.
* doctor: a plain PyTorch loop (DataLoader, zero_grad, backward, step) over the same MLP data, bare and
  inside ``diagnose()`` (every check on). Goal: <= 3x.

Run: ``python benchmarks/doctor_overhead.py [--repeats 5]``
"""

from __future__ import annotations

import argparse
import inspect
import time
from collections.abc import Callable

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer
from torchwork.doctor.guard import Guard, attach_guard
from torchwork.doctor.session import diagnose


def mlp_data(rows: int = 20_000) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 64, generator=generator)
    y = (x[:, :10].sum(dim=1) > 0).long() + (x[:, 10:20].sum(dim=1) > 0).long()
    return TensorDataset(x, y)


def cnn_data(rows: int = 2_048) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 1, 28, 28, generator=generator)
    y = torch.randint(0, 10, (rows,), generator=generator)
    return TensorDataset(x, y)


def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 3))


def make_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def engine_epoch(make: Callable[[], nn.Module], data: TensorDataset, guard: bool) -> float:
    """CPU seconds of one epoch of Trainer steps (batch 64), guarded or not."""
    torch.manual_seed(0)
    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [(data.tensors[0][i:i + 64], data.tensors[1][i:i + 64]) for i in range(0, len(data), 64)]
    if "guard" in inspect.signature(Trainer.__init__).parameters:  # the engine wires the guard itself
        trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", progress=False, guard=guard)
        started = time.process_time()
        trainer.fit(batches, epochs=1)
        return time.process_time() - started
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", progress=False)
    watcher = attach_guard(trainer) if guard else None
    started = time.process_time()
    for batch in batches:
        loss = trainer.step(batch)
        if watcher is not None:
            watcher.after_step(loss, batch_size=len(batch[1]))
    return time.process_time() - started


def plain_loop(data: TensorDataset, epochs: int = 1) -> None:
    """A user's ordinary training loop, as `torchwork doctor` would see it."""
    torch.manual_seed(0)
    model = make_mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()


def doctor_epoch(data: TensorDataset, doctor: bool) -> float:
    started = time.process_time()
    if doctor:
        with diagnose() as session:
            plain_loop(data)
        assert not session.internal_errors, session.internal_errors
    else:
        plain_loop(data)
    return time.process_time() - started


class GuardClock:
    """Accumulates the CPU time spent inside the guard per step: its own share, free of run-to-run noise.

    The Trainer hands each step to ``Guard.on_step_end`` (which calls ``after_step``), so that is what is
    clocked, the dispatch included."""

    def __init__(self) -> None:
        self.ns = 0
        self.calls = 0
        self._original = Guard.on_step_end

    def __enter__(self) -> GuardClock:
        original, clock = self._original, self

        def timed(guard: Guard, *args: object, **kwargs: object) -> None:
            started = time.perf_counter_ns()  # one thread, CPU-bound: wall time is CPU time, finer grained
            original(guard, *args, **kwargs)
            clock.ns += time.perf_counter_ns() - started
            clock.calls += 1

        Guard.on_step_end = timed
        return self

    def __exit__(self, *exc: object) -> None:
        Guard.on_step_end = self._original


def guard_share(make: Callable[[], nn.Module], data: TensorDataset) -> tuple[float, float]:
    """(percent of the unguarded epoch's CPU time spent in the guard, microseconds per step)."""
    off = min(engine_epoch(make, data, False) for _ in range(2))
    engine_epoch(make, data, True)  # warm-up: first calls initialise kernels the guard uses
    clocks = []
    for _ in range(2):
        with GuardClock() as clock:
            engine_epoch(make, data, True)
        clocks.append(clock)
    best = min(clocks, key=lambda c: c.ns)
    return 100 * best.ns / 1e9 / off, best.ns / 1e3 / max(best.calls, 1)


def best_of(repeats: int, variants: dict[str, Callable[[], float]]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, run in variants.items():  # alternate, so that drift hits every variant alike
            times[name].append(run())
    return {name: min(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mlp, cnn = mlp_data(), cnn_data()
    engine_epoch(make_mlp, mlp, False)  # warm-up
    m = best_of(args.repeats, {"off": lambda: engine_epoch(make_mlp, mlp, False),
                               "on": lambda: engine_epoch(make_mlp, mlp, True)})
    c = best_of(max(2, args.repeats // 2), {"off": lambda: engine_epoch(make_cnn, cnn, False),
                                            "on": lambda: engine_epoch(make_cnn, cnn, True)})
    mlp_share, mlp_us = guard_share(make_mlp, mlp)
    cnn_share, cnn_us = guard_share(make_cnn, cnn)
    d = best_of(max(2, args.repeats // 2), {"plain": lambda: doctor_epoch(mlp, False),
                                            "doctor": lambda: doctor_epoch(mlp, True)})
    result = {
        "threads": torch.get_num_threads(),
        "engine_wires_guard": "guard" in inspect.signature(Trainer.__init__).parameters,
        # overhead_pct: best-of epochs on vs off (noisy); guard_share_pct: time inside the guard itself
        "guard_mlp": {"off_cpu_s": round(m["off"], 4), "on_cpu_s": round(m["on"], 4),
                      "overhead_pct": round(100 * (m["on"] / m["off"] - 1), 2),
                      "guard_share_pct": round(mlp_share, 3), "guard_us_per_step": round(mlp_us, 2),
                      "goal_pct": 5},
        "guard_cnn": {"off_cpu_s": round(c["off"], 4), "on_cpu_s": round(c["on"], 4),
                      "overhead_pct": round(100 * (c["on"] / c["off"] - 1), 2),
                      "guard_share_pct": round(cnn_share, 3), "guard_us_per_step": round(cnn_us, 2),
                      "goal_pct": 2},
        "doctor_mlp": {"plain_cpu_s": round(d["plain"], 4), "doctor_cpu_s": round(d["doctor"], 4),
                       "ratio": round(d["doctor"] / d["plain"], 2), "goal_ratio": 3},
        "data": {"mlp": [len(mlp), 64], "cnn": [len(cnn), 1, 28, 28], "batch": 64},
    }
    record(result)


if __name__ == "__main__":
    main()
