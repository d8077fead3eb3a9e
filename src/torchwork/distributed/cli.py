"""``torchwork launch [--nproc N] [--nnodes M ...] SCRIPT [ARGS...]``: the script run by ``torchrun`` on N
processes (the command line printed first), the CPU cores split between them; the exit code is torchrun's.
The command line itself is :func:`torchwork.distributed.launch.torchrun_command`.

Example (a bad count is refused before anything starts):
    >>> import argparse
    >>> cli_launch(argparse.Namespace(script="train.py", script_args=[], nproc=0, nnodes=1, node_rank=0,
    ...                               master_addr=None, master_port=29500))
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --nproc 0: need at least one process per node.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from torchwork.distributed.launch import torchrun_command


def cli_launch(args: argparse.Namespace) -> int:
    """Run ``args.script`` under torchrun; its exit code."""
    command = torchrun_command(args.script, args.script_args, args.nproc, args.nnodes, args.node_rank,
                               args.master_addr, args.master_port)
    print("torchwork: " + " ".join(command[1:]).replace("-m torch.distributed.run", "torchrun", 1),
          file=sys.stderr)
    env = dict(os.environ)
    # One intra-op thread pool per process would oversubscribe the CPU: split the cores between them.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc)))
    return subprocess.run(command, env=env).returncode
