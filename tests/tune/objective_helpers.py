"""A user's own objective for the tune tests, in a file of its own as a user writes it, and a study of it
(``torchwork.tune.tune_objective``) run in a real subprocess from that file's folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tune_helpers import environment

# A linear regression trained by the Trainer; TUNE_TEST_EPOCH_S slows each epoch so that a kill lands mid-trial.
OBJECTIVE = '''
import os
import time

import torch
from torch import nn

from torchwork import Trainer


class Slow:
    def on_epoch_end(self, trainer, logs):
        time.sleep(float(os.environ.get("TUNE_TEST_EPOCH_S", "0")))


def objective(trial):
    torch.manual_seed(trial.seed)
    x = torch.randn(256, 8)
    y = x @ torch.arange(8.0) + 0.1 * torch.randn(256)
    train = [(x[i:i + 32], y[i:i + 32, None]) for i in range(0, 192, 32)]
    val = [(x[192:], y[192:, None])]
    model = nn.Linear(8, 1)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=trial.params["lr"]), nn.MSELoss(),
                      run_dir=trial.run_dir, callbacks=[*trial.callbacks, Slow()], threads=trial.threads,
                      progress=False, config={**trial.params, **trial.record})
    trainer.fit(train, val, epochs=trial.params["epochs"])
    return min(logs["val_loss"] for logs in trainer.history)


def untrained(trial):
    return 1.0
'''
SPACE = {"lr": {"low": 1.0e-3, "high": 0.1, "log": True}, "epochs": {"choices": [3, 4]}}


def write_objective(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_objective.py").write_text(OBJECTIVE)


def tune_script(study: str, trials: int, workers: int, pruner: str) -> str:
    return (f"from torchwork.tune import tune_objective\n"
            f"tune_objective('my_objective.py:objective', {SPACE!r}, {trials}, metric='val_loss', "
            f"direction='minimize', run_dir='runs', study={study!r}, workers={workers}, pruner={pruner!r})\n")


def start(folder: Path, study: str, trials: int = 3, workers: int = 1, pruner: str = "none",
          epoch_s: float = 0.0) -> subprocess.Popen:
    write_objective(folder)
    log = (folder / f"{study}.log").open("w")
    return subprocess.Popen([sys.executable, "-c", tune_script(study, trials, workers, pruner)], cwd=folder,
                            env={**environment(), "TUNE_TEST_EPOCH_S": str(epoch_s)}, stdout=log,
                            stderr=subprocess.STDOUT)


def finish(folder: Path, process: subprocess.Popen, study: str) -> None:
    try:
        assert process.wait(timeout=600) == 0, (folder / f"{study}.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()


