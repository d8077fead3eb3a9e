"""``torchwork resume RUN_FOLDER``: run the command recorded in a run's manifest again, resuming that run.

The manifest records the interpreter, argv and working directory of the run. The command is started
again with ``TORCHWORK_RESUME=RUN_FOLDER``, which makes ``Trainer.fit`` continue that run folder from its
newest valid checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from torchwork.errors import CheckpointError


def resume_command(run_folder: str | Path) -> tuple[list[str], str]:
    """The command line and working directory that continue ``run_folder``."""
    run = Path(run_folder).resolve()
    manifest_path = run / "manifest.json"
    if not manifest_path.is_file():
        raise CheckpointError(f"{run} has no manifest.json: it is not a torchwork run folder "
                              "(expected RUN_DIR/<timestamp>-<id>/).")
    command = json.loads(manifest_path.read_text()).get("command") or {}
    argv, cwd = command.get("argv"), command.get("cwd") or os.getcwd()
    if not argv:
        raise CheckpointError(f"{manifest_path} records no command to run again.")
    executable = command.get("executable") or sys.executable
    if not Path(executable).exists():
        executable = sys.executable
    return [executable, *argv], cwd


def main(args: argparse.Namespace) -> int:
    command, cwd = resume_command(args.run_folder)
    print(f"torchwork: resuming {args.run_folder}: {' '.join(command)} (in {cwd})", file=sys.stderr)
    env = dict(os.environ, TORCHWORK_RESUME=str(Path(args.run_folder).resolve()))
    return subprocess.run(command, cwd=cwd, env=env).returncode
