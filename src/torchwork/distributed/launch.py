"""``torchwork launch`` (:mod:`torchwork.distributed.cli`): a thin front over ``torchrun`` (PyTorch's own
launcher), nothing home-made. Every argument is checked before torchrun starts (:func:`check_launch`, and
the script is a file), so a typo is one line, not torchrun's traceback.

Example:
    >>> import pathlib, tempfile
    >>> from torchwork.distributed.launch import torchrun_command
    >>> script = pathlib.Path(tempfile.mkdtemp()) / "train.py"
    >>> _ = script.write_text("print('hello')")
    >>> torchrun_command(str(script), ["--epochs", "3"], nproc=2)[3:] == [
    ...     "--standalone", "--nproc-per-node", "2", str(script), "--epochs", "3"]
    True
    >>> torchrun_command(str(script), [], nproc=1, nnodes=2, master_addr="10.0.0.1", master_port=99999)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --master-port 99999: use a TCP port in 1..65535 that node 0 has free.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torchwork.errors import ConfigError


def most_processes() -> int:
    """The most processes ``--nproc`` may start on this machine: 4 per usable CPU, and 16 at least (one per
    GPU on a machine with up to 16 GPUs); more would only wait for each other."""
    from torchwork.threads import usable_cpus

    return max(16, 4 * usable_cpus())


def check_launch(nproc: int, nnodes: int = 1, node_rank: int = 0, master_port: int = 29500) -> None:
    """Refuse counts and a port torchrun would fail on (or silently misread), each problem named with the
    flag that sets it, all at once.

    Example:
        >>> check_launch(2, nnodes=0, node_rank=0)
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --nnodes 0: need at least one machine (1 for this one alone).
    """
    problems = []
    if nproc < 1:
        problems.append(f"--nproc {nproc}: need at least one process per node")
    elif nproc > most_processes():
        problems.append(f"--nproc {nproc}: at most {most_processes()} processes on this machine (4 per usable "
                        "CPU, 16 at least); start one per GPU, or a few per CPU")
    if nnodes < 1:
        problems.append(f"--nnodes {nnodes}: need at least one machine (1 for this one alone)")
    elif not 0 <= node_rank < nnodes:
        problems.append(f"--node-rank {node_rank} must be in [0, {nnodes}): 0 for the first machine, "
                        f"{nnodes - 1} for the last")
    if not 1 <= master_port <= 65535:
        problems.append(f"--master-port {master_port}: use a TCP port in 1..65535 that node 0 has free")
    if problems:
        raise ConfigError("; ".join(problems) + ".")


def check_script(script: str) -> None:
    """Refuse a script that is not a regular file before torchrun tries to run it on every process."""
    path = Path(script)
    if path.is_dir():
        raise ConfigError(f"{script} is a directory; give the training script inside it (e.g. {path / 'train.py'}).")
    if not path.exists():
        raise ConfigError(f"{script}: no such file; give the path of the training script to launch.")
    if not path.is_file():
        raise ConfigError(f"{script} is not a regular file; give the path of the training script to launch.")


def torchrun_command(script: str, script_args: list[str], nproc: int, nnodes: int = 1, node_rank: int = 0,
                     master_addr: str | None = None, master_port: int = 29500) -> list[str]:
    """The ``python -m torch.distributed.run`` command line for one machine or one node of several; ``script``
    ``"-m"`` runs the module that ``script_args`` begins with."""
    check_launch(nproc, nnodes, node_rank, master_port)
    command = [sys.executable, "-m", "torch.distributed.run"]
    if nnodes == 1 and master_addr is None:
        command += ["--standalone"]  # local rendezvous on a free port
    else:
        if master_addr is None:
            raise ConfigError(f"--nnodes {nnodes} needs --master-addr: the address of node 0, which every "
                              "node can reach.")
        command += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", master_addr,
                    "--master-port", str(master_port)]
    if script != "-m":
        check_script(script)
    return [*command, "--nproc-per-node", str(nproc), script, *script_args]
