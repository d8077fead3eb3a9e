"""Training script for the DDP tests: run under torchrun (or alone, as the single-process reference).

Usage: ddp_script.py OUT [--batch B] [--accumulate K] [--run-dir D] [--every N] [--epochs E]
                     [--kill-rank R --kill-at STEP] [--diverge-at STEP] [--reference] [--report-teardown]
--reference: one process reading the same global order (DistributedSampler with one replica).
--report-teardown: at exit, after torchwork's own exit handlers, print whether the process group still exists.
"""

from __future__ import annotations

import argparse
import atexit
import faulthandler
import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from torchwork import Trainer, seed_everything

SEED = 99


class KillAt:
    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step = rank, step

    def on_step_end(self, trainer, logs):
        if trainer.world.rank == self.rank and trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class DivergeAt:
    """A bug: rank 1 all-reduces a tensor of another shape than rank 0."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, logs):
        if trainer.global_step == self.step:
            size = 1 if dist.get_rank() == 0 else 2
            dist.all_reduce(torch.ones(size))  # DIVERGENT-COLLECTIVE


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accumulate", type=int, nargs="+", default=[1])
    parser.add_argument("--run-dir")
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--kill-rank", type=int)
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--diverge-at", type=int)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--report-teardown", action="store_true")
    parser.add_argument("--save-load", help="after fit: trainer.save(PATH); trainer.load(PATH) on every rank")
    args = parser.parse_args()
    if args.report_teardown:  # registered first, so it runs after any handler the Trainer registers
        atexit.register(lambda: print(f"TEARDOWN rank {os.environ['RANK']} process group still initialized: "
                                      f"{dist.is_initialized()}", flush=True))

    dump_after = float(os.environ.get("DDP_SCRIPT_DUMP_AFTER_S", "0"))
    if dump_after:  # a rank still running then prints every thread's stack and exits: a hang says where it hung
        faulthandler.dump_traceback_later(dump_after, exit=True)
    torch.set_num_threads(1)
    results = {}
    for accumulate in args.accumulate:
        seed_everything(SEED)
        g = torch.Generator().manual_seed(0)
        dataset = TensorDataset(torch.randn(96, 10, generator=g, dtype=torch.float64),
                                torch.randint(0, 3, (96,), generator=g))
        if args.reference:
            sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=SEED)
            train = DataLoader(dataset, batch_size=args.batch, sampler=sampler)
        else:
            train = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=1)
        torch.manual_seed(1)
        model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Dropout(args.dropout), nn.Linear(16, 3)).double()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
        callbacks = []
        if args.kill_at:
            callbacks.append(KillAt(args.kill_rank, args.kill_at))
        if args.diverge_at:
            callbacks.append(DivergeAt(args.diverge_at))
        # A minute where ranks diverge on purpose (gloo waits for the missing collective until the timeout);
        # else five: on a machine busy with other tests a rank can wait a minute for its peer's step. A killed
        # rank needs no short timeout: its closed connections fail its peer's next collective at once (a
        # minute here once failed the kill test under load: rank 0 timed out before rank 1 reached its kill).
        timeout_s = 60 if args.diverge_at else 300
        trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", threads=1, accumulate=accumulate,
                          run_dir=args.run_dir, checkpoint_every_n_steps=args.every, callbacks=callbacks,
                          tensorboard=False, progress=False, distributed_timeout_s=timeout_s)
        history = trainer.fit(train, val_loader=DataLoader(dataset, batch_size=16), epochs=args.epochs,
                              resume="latest" if args.run_dir else None)
        if args.save_load:
            trainer.save(args.save_load)
            trainer.load(args.save_load)
            print(f"SAVED AND LOADED rank {trainer.world.rank} step {trainer.global_step}", flush=True)
        results[accumulate] = {"model": model.state_dict(), "history": history,
                               "world_size": trainer.world.world_size, "run": str(trainer.run_path)}
    if trainer.world.is_rank_zero:
        torch.save(results, args.out)


if __name__ == "__main__":
    main()
