"""A training script the resume tests run in real subprocesses.

Usage: python resume_script.py RUN_DIR OUT_FILE [--kill-at STEP] [--every N] [--epochs E] [--nan-at STEP]
                                [--kill-in-write GLOB] [--kill-after-unlink NAME]
                                [--max-steps N --eval-every K [--kill-in-eval STEP]]
Trains an MLP with Dropout on a shuffled DataLoader with 2 workers, checkpointing every N steps, with
resume="latest". --kill-at sends SIGKILL to itself right after that optimizer step. --kill-in-write sends it
inside an atomic write, when the temp file matching GLOB is written but not yet renamed (at its fsync);
--kill-after-unlink right after a file named NAME is deleted (mid-pruning). --max-steps trains that many
optimizer steps instead of epochs, evaluating the train loader itself (given its own generator) and the
validation loader every --eval-every steps and at step 0, as nanoGPT does; --kill-in-eval sends SIGKILL at
the start of the validation set's pass at that step, after the train set's.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import pathlib
import signal

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer, seed_everything


class KillAt:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, logs):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class NaNAt:
    """Poisons the weights after a given step (a diverged run)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, logs):
        if trainer.global_step == self.step:
            with torch.no_grad():
                trainer.model[0].weight.fill_(float("nan"))


class KillInEvaluation:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_evaluate_start(self, trainer, name):
        if trainer.global_step == self.step and name == "val":
            os.kill(os.getpid(), signal.SIGKILL)


def kill_in_write(pattern: str) -> None:
    real_fsync = os.fsync

    def fsync(fd):
        real_fsync(fd)
        if fnmatch.fnmatch(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")), pattern):
            os.kill(os.getpid(), signal.SIGKILL)

    os.fsync = fsync


def kill_after_unlink(name: str) -> None:
    real_unlink = pathlib.Path.unlink

    def unlink(self, missing_ok=False):
        real_unlink(self, missing_ok=missing_ok)
        if self.name == name:
            os.kill(os.getpid(), signal.SIGKILL)

    pathlib.Path.unlink = unlink


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--kill-in-write")
    parser.add_argument("--kill-after-unlink")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--kill-in-eval", type=int)
    args = parser.parse_args()
    if args.kill_in_write:
        kill_in_write(args.kill_in_write)
    if args.kill_after_unlink:
        kill_after_unlink(args.kill_after_unlink)

    torch.set_num_threads(1)
    seed_everything(1234)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(150, 12, generator=g), torch.randint(0, 3, (150,), generator=g)
    own_order = torch.Generator().manual_seed(7) if args.max_steps else None
    train = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, num_workers=2, generator=own_order)
    val = DataLoader(TensorDataset(x[:40], y[:40]), batch_size=20, num_workers=2)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.7)
    callbacks = []
    if args.kill_at:
        callbacks.append(KillAt(args.kill_at))
    if args.nan_at:
        callbacks.append(NaNAt(args.nan_at))
    if args.kill_in_eval:
        callbacks.append(KillInEvaluation(args.kill_in_eval))
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", threads=1, run_dir=args.run_dir,
                      checkpoint_every_n_steps=args.every, keep_checkpoints=3, callbacks=callbacks,
                      log_every_n_steps=1, config={"script": "resume_script", "epochs": args.epochs},
                      tensorboard=False, progress=False)
    if args.max_steps:
        trainer.fit(train, {"train": train, "val": val}, max_steps=args.max_steps, eval_every=args.eval_every,
                    eval_at_start=True, resume="latest")
    else:
        trainer.fit(train, val, epochs=args.epochs, resume="latest")
    torch.save({"model": model.state_dict(), "history": trainer.history, "run": str(trainer.run_path)},
               args.out)


if __name__ == "__main__":
    main()
