"""``torchwork launch`` (:mod:`torchwork.distributed.cli`): a thin front over ``torchrun`` (PyTorch's own
launcher), nothing home-made.

Example:
    >>> from torchwork.distributed.launch import torchrun_command
    >>> torchrun_command("train.py", ["--epochs", "3"], nproc=2)[3:]
    ['--standalone', '--nproc-per-node', '2', 'train.py', '--epochs', '3']
"""

from __future__ import annotations

import sys

from torchwork.errors import ConfigError


def torchrun_command(script: str, script_args: list[str], nproc: int, nnodes: int = 1, node_rank: int = 0,
                     master_addr: str | None = None, master_port: int = 29500) -> list[str]:
    """The ``python -m torch.distributed.run`` command line for one machine or one node of several."""
    if nproc < 1:
        raise ConfigError(f"--nproc {nproc}: need at least one process per node.")
    command = [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1 and master_addr is None:
        command += ["--standalone"]  # local rendezvous on a free port
    else:
        if master_addr is None:
            raise ConfigError(f"--nnodes {nnodes} needs --master-addr: the address of node 0, which every "
                              "node can reach.")
        if not 0 <= node_rank < nnodes:
            raise ConfigError(f"--node-rank {node_rank} must be in [0, {nnodes}).")
        command += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", master_addr,
                    "--master-port", str(master_port)]
    return [*command, "--nproc-per-node", str(nproc), script, *script_args]
