"""Small real runs for the runs tests: a Trainer on a TensorDataset, in a git work tree of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer, seed_everything

RESUME_SCRIPT = Path(__file__).with_name("resume_script.py")


def run_resume_script(run_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``resume_script.py RUN_DIR OUT ...`` (the kill-and-resume tests' training) in a real subprocess."""
    return subprocess.run([sys.executable, str(RESUME_SCRIPT), str(run_dir), str(out), *extra],
                          capture_output=True, text=True, timeout=300)


def git_repo(path: Path, files: dict[str, str]) -> Path:
    """A fresh git work tree at ``path`` holding ``files``, committed."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first"]):
        subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)
    return path


def tensor_loaders(seed: int = 0, rows: int = 64, relabel: int = 0) -> tuple[DataLoader, DataLoader]:
    generator = torch.Generator().manual_seed(123)  # the data does not depend on the run's seed
    x = torch.randn(rows, 6, generator=generator)
    y = (x[:, 0] > 0).long()
    y[:relabel] = 1 - y[:relabel]
    val_x = torch.randn(32, 6, generator=generator)
    train = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True,
                       generator=torch.Generator().manual_seed(seed))
    return train, DataLoader(TensorDataset(val_x, (val_x[:, 0] > 0).long()), batch_size=32)


def tiny_fit(run_dir: Path, seed: int = 0, lr: float = 0.05, epochs: int = 3, relabel: int = 0,
             **kwargs: Any) -> Trainer:
    seed_everything(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=lr), nn.CrossEntropyLoss(), device="cpu",
                      run_dir=run_dir, progress=False, config={"lr": lr, "epochs": epochs, "seed": seed},
                      **{"threads": 1, **kwargs})  # a fixed count: "auto" follows the machine's load
    train, val = tensor_loaders(seed, relabel=relabel)
    trainer.fit(train, val, epochs=epochs)
    return trainer
