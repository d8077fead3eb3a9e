"""Two Trainers in one script, the second's run nested in the first's (pretrain, then fine-tune).

Usage: python two_trainers_script.py RUN_DIR OUT_FILE [--kill-at STEP] [--first-keeps-no-run]
--kill-at sends SIGKILL to the process after that optimizer step of the *second* Trainer; so does the
environment variable TWO_TRAINERS_KILL_AT, which `torchwork resume` does not see in the recorded command.
--first-keeps-no-run: the first Trainer has no run_dir (no checkpoints) and the second's run is RUN_DIR/finetune.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import torch
from torch import nn

from torchwork import Trainer, seed_everything


class KillAt:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, logs):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--first-keeps-no-run", action="store_true")
    args = parser.parse_args()
    kill_at = args.kill_at or int(os.environ.get("TWO_TRAINERS_KILL_AT", "0"))
    torch.set_num_threads(1)
    seed_everything(7)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 6, generator=g), torch.randint(0, 3, (96,), generator=g)
    data = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 96, 16)]
    # first: a bigger model pretrained; its weights start the second one (a different model)
    first = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    pre = Trainer(first, torch.optim.SGD(first.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu", threads=1,
                  run_dir=None if args.first_keeps_no_run else args.run_dir, progress=False, tensorboard=False,
                  guard=False)
    pre.fit(data, data[:2], epochs=2)
    second = nn.Sequential(first[0], nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 3))
    callbacks = [KillAt(kill_at)] if kill_at else []
    finetune_dir = Path(args.run_dir, "finetune") if pre.run_path is None else pre.run_path / "finetune"
    tune = Trainer(second, torch.optim.AdamW(second.parameters(), lr=1e-2), nn.CrossEntropyLoss(), device="cpu", threads=1,
                   run_dir=finetune_dir, checkpoint_every_n_steps=2, progress=False,
                   tensorboard=False, guard=False, callbacks=callbacks)
    tune.fit(data, data[:2], epochs=3)
    torch.save({"model": second.state_dict(), "runs": [str(pre.run_path), str(tune.run_path)],
                "steps": [pre.global_step, tune.global_step]}, args.out)


if __name__ == "__main__":
    main()
