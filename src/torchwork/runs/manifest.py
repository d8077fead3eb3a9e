"""The run manifest: everything needed to know what a run was, and to run it again.

Example:
    >>> import torch
    >>> from torchwork.runs.manifest import parameter_counts
    >>> parameter_counts(torch.nn.Linear(3, 2))
    {'total': 8, 'trainable': 8}
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import torch

from torchwork.data.lengths import length_or_none
from torchwork.env.report import compact_snapshot


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    params = {id(p): p for p in model.parameters()}.values()  # shared weights count once
    return {"total": sum(p.numel() for p in params),
            "trainable": sum(p.numel() for p in params if p.requires_grad)}


def git_state(cwd: str | None = None) -> dict[str, Any]:
    """The commit and whether the work tree has uncommitted changes (None outside a git repository)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def _dataset_size(loader: Any) -> int | None:
    return length_or_none(getattr(loader, "dataset", loader))


def _hyperparameters(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    groups = [{k: v for k, v in group.items() if k != "params"} | {"num_params": len(group["params"])}
              for group in optimizer.param_groups]
    return {"class": type(optimizer).__name__, "defaults": dict(optimizer.defaults), "param_groups": groups}


def _command() -> dict[str, Any]:
    """The command line as recorded: its secrets (a password in a storage URL, ``--token X``) masked, and
    ``masked: true`` when something was, so that resume knows the recorded line cannot run as it is."""
    from torchwork.masking import mask_argv

    argv = mask_argv(sys.argv)
    command: dict[str, Any] = {"argv": argv, "executable": sys.executable, "cwd": os.getcwd()}
    if argv != list(sys.argv):
        command["masked"] = True
    return command


@dataclass
class RunDescription:
    """What trains, as the manifest records it: ``training`` holds the resolved step settings
    (precision, accumulate, clipping, loss weights, device, checkpointing)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    training: dict[str, Any]


def build_manifest(description: RunDescription, train_loader: Any, val_loader: Any, epochs: int | None,
                   config: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest of a run (see the README for every field)."""
    from torchwork.runs.checkpoint import unwrap_model
    from torchwork.seeding import current_seed

    model = unwrap_model(description.model)
    scheduler = description.scheduler
    cuda = torch.version.cuda if torch.cuda.is_available() else None
    return {
        "torchwork_version": metadata.version("torchwork"),  # not torchwork.__version__: runs is below the API
        "model": {"class": type(model).__name__, "structure": str(model), "parameters": parameter_counts(model)},
        **current_seed(),
        "data": {"train_size": _dataset_size(train_loader),
                 "validation_size": _dataset_size(val_loader) if val_loader is not None else None,
                 "train_batches": length_or_none(train_loader)},
        "optimizer": _hyperparameters(description.optimizer),
        "scheduler": ({"class": type(scheduler).__name__,
                       "state": {k: v for k, v in scheduler.state_dict().items()
                                 if isinstance(v, (int, float, str, bool, list))}} if scheduler else None),
        "training": {"epochs": epochs, **description.training},
        "config": config or {},
        "command": _command(),
        "git": git_state(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "cuda": cuda,
                     "cudnn": torch.backends.cudnn.version() if cuda else None},
        "environment": compact_snapshot(),  # what `torchwork env diff RUN_A RUN_B` compares
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                 "cpu_count": os.cpu_count()},
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }


def _readable(value: Any) -> str:
    """A hyperparameter without float noise: ``0.00011999999999999988`` -> ``0.00012``; tuples likewise."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_readable(v) for v in value) + ")"
    return str(value)


def _length(training: dict[str, Any]) -> str:
    """How long the run trains: ``3 epochs``, or ``2000 steps (3 epochs), evaluated every 250``."""
    epochs = f"{training['epochs']} epochs" if training.get("epochs") is not None else ""
    if training.get("max_steps") is None:
        return epochs or "epochs not known"
    every = f", evaluated every {training['eval_every']}" if training.get("eval_every") else ""
    return f"{training['max_steps']} steps" + (f" ({epochs})" if epochs else "") + every


def format_summary(manifest: dict[str, Any], run_path: Any) -> str:
    """A readable summary of the manifest, printed when a run starts."""
    params = manifest["model"]["parameters"]
    training, data, opt = manifest["training"], manifest["data"], manifest["optimizer"]
    hyper = ", ".join(f"{k}={_readable(v)}" for k, v in opt["param_groups"][0].items()
                      if k in ("lr", "max_lr", "weight_decay", "momentum", "betas"))
    git = manifest["git"]
    lines = [
        f"run       {run_path}",
        f"model     {manifest['model']['class']}: {params['total']:,} parameters "
        f"({params['trainable']:,} trainable)",
        f"data      train {data['train_size']}  validation {data['validation_size']}",
        f"optimizer {opt['class']}({hyper})"
        + (f"  scheduler {manifest['scheduler']['class']}" if manifest["scheduler"] else ""),
        f"training  {_length(training)} on {training['device']}, precision {training['precision']}, "
        f"accumulate {training['accumulate']}, clip {training['clip_grad_norm']}",
        f"seed      {manifest['seed']} (deterministic={manifest['deterministic']})"
        + (f"; not seeded: torch's initial seed was {manifest['torch_initial_seed']}"
           if manifest["seed"] is None and manifest.get("torch_initial_seed") is not None else ""),
        f"code      git {str(git['commit'])[:10]}{' (dirty)' if git['dirty'] else ''}; "
        f"python {manifest['versions']['python']}, torch {manifest['versions']['torch']}, "
        f"cuda {manifest['versions']['cuda']}; world size {manifest['world_size']}",
    ]
    return "\n".join(lines)
