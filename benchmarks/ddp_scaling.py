"""DDP on this machine: step time with 1 and 2 processes (gloo, CPU) and the share spent communicating.

Launches itself under torchrun. Each worker trains an MLP (about 1.6 M parameters, 6.4 MB of fp32
gradients) with torchwork.Trainer on a fixed global batch, and then times, with raw DDP, steps with the
gradient all-reduce against steps under ``no_sync()`` (same compute, no communication), interleaved.
Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

GLOBAL_BATCH, STEPS, HIDDEN = 256, 30, 1024


def worker(out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from torchwork import Trainer, seed_everything

    torch.set_num_threads(1)
    seed_everything(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    x, y = torch.randn(GLOBAL_BATCH * STEPS, 512), torch.randint(0, 10, (GLOBAL_BATCH * STEPS,))
    model = nn.Sequential(nn.Linear(512, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 10))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss(), device="cpu",
                      progress=False)
    loader = DataLoader(TensorDataset(x, y), batch_size=GLOBAL_BATCH // world)
    trainer.fit(loader, epochs=1)  # warm-up
    started = time.perf_counter()
    trainer.fit(loader, epochs=2)
    result = {"world_size": world, "seconds_per_global_batch": (time.perf_counter() - started) / (2 * STEPS)}
    if world > 1:
        ddp = trainer._ddp
        batch = x[: GLOBAL_BATCH // world], y[: GLOBAL_BATCH // world]
        loss_fn = nn.CrossEntropyLoss()

        def step(sync: bool) -> float:
            start = time.perf_counter()
            if sync:
                loss_fn(ddp(batch[0]), batch[1]).backward()
            else:
                with ddp.no_sync():
                    loss_fn(ddp(batch[0]), batch[1]).backward()
            dist.barrier()
            return time.perf_counter() - start

        with_comm, without = [], []
        for _ in range(20):
            with_comm.append(step(True))
            without.append(step(False))
        result["forward_backward_s"] = {"with_allreduce": statistics.median(with_comm),
                                        "without": statistics.median(without)}
        result["communication_share"] = max(0.0, 1 - statistics.median(without) / statistics.median(with_comm))
    if int(os.environ.get("RANK", "0")) == 0:
        with open(out, "w") as handle:
            json.dump(result, handle)


def launch(nproc: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if nproc == 1:
            command = [sys.executable, __file__, "--worker", out]
        else:
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                       str(nproc), __file__, "--worker", out]
        subprocess.run(command, check=True, env=env, capture_output=True)
        with open(out) as handle:
            return json.load(handle)


def main() -> dict:
    one, two = [], []
    for _ in range(2):  # interleaved rounds
        one.append(launch(1))
        two.append(launch(2))
    t1 = statistics.median(r["seconds_per_global_batch"] for r in one)
    t2 = statistics.median(r["seconds_per_global_batch"] for r in two)
    share = statistics.median(r["communication_share"] for r in two)
    return {
        "workload": f"MLP 512-{HIDDEN}-{HIDDEN}-10 (1.6M params), global batch {GLOBAL_BATCH}, 1 thread/process",
        "seconds_per_global_batch": {"1_process": round(t1, 4), "2_processes": round(t2, 4)},
        "speedup_2_vs_1": round(t1 / t2, 3),
        "communication_share_2_processes": round(share, 3),
        "note": ("2 processes on 2 shared cores: compute halves per rank, but the gloo all-reduce of 6.4 MB "
                 "of gradients goes through loopback TCP on the same cores. On a multi-GPU machine NCCL "
                 "moves gradients over NVLink/PCIe while the backward pass still runs (DDP overlaps buckets), "
                 "so the communication share there is far smaller."),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        record(main(), indent=2)
