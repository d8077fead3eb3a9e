"""Gradual unfreezing in a real subprocess, for the exact-resume test.

Usage: python unfreeze_script.py RUN_DIR OUT_FILE [--kill-at STEP] [--house-loader]
A small CNN with BatchNorm (conv stem, two blocks, head) starts with everything but the head frozen;
block 1 is unfrozen at epoch 1 and the stem and block 0 at epoch 2, with layer-wise learning rates and a
warm-up + decay LambdaLR. Checkpoints every 3 steps, resume="latest"; --kill-at sends SIGKILL to itself
right after that optimizer step. --house-loader shuffles with torchwork.data.loader (its own seeded
generator) instead of the global RNG.
"""

from __future__ import annotations

import argparse
import os
import signal

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer, seed_everything
from torchwork.finetune import GradualUnfreezing, freeze, param_groups


class KillAt:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, logs):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def block(channels: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.ModuleList([block(8), block(8)])
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(8, 3))

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x.mean(dim=(2, 3)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--house-loader", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    seed_everything(7)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 1, 8, 8, generator=g), torch.randint(0, 3, (96,), generator=g)
    if args.house_loader:
        from torchwork.data import loader

        train = loader(TensorDataset(x, y), 16, shuffle=True, seed=1, num_workers=0)
    else:
        train = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)  # shuffled by the global RNG
    model = Net()
    freeze(model, "stem", "blocks")
    plan = param_groups(model, lr=1e-2, layer_decay=0.5, head="head")
    optimizer = torch.optim.AdamW(plan)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4) * 0.97 ** step)
    unfreezing = GradualUnfreezing(optimizer, plan, {1: "blocks.1", 2: ["blocks.0", "stem"]}, scheduler=scheduler)
    callbacks = [unfreezing] + ([KillAt(args.kill_at)] if args.kill_at else [])
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", threads=1, run_dir=args.run_dir,
                      checkpoint_every_n_steps=3, callbacks=callbacks, tensorboard=False, progress=False,
                      clip_grad_norm=1.0, log_every_n_steps=1)
    trainer.fit(train, epochs=4, resume="latest")
    torch.save({"model": model.state_dict(), "history": trainer.history,
                "frozen": {n: p.requires_grad for n, p in model.named_parameters()},
                "lrs": [g["lr"] for g in optimizer.param_groups],
                "groups": [len(g["params"]) for g in optimizer.param_groups],
                "bn_modes": [m.training for m in model.modules() if isinstance(m, nn.BatchNorm2d)]}, args.out)


if __name__ == "__main__":
    main()
