"""distributed/cli.py: ``torchwork launch`` runs the script under torchrun with its arguments, the command line
printed first, the cores split between the processes (unless OMP_NUM_THREADS is set), torchrun's exit code
returned; a bad count is refused before anything starts. One process: the launch is what is tested here, DDP
itself in tests/distributed/test_distributed_ddp.py."""

from __future__ import annotations

import json
import os

import pytest

from torchwork.cli import build_parser
from torchwork.distributed.cli import cli_launch
from torchwork.errors import ConfigError

SCRIPT = """import json, os, sys
json.dump({"argv": sys.argv[1:], "rank": os.environ["RANK"], "world": os.environ["WORLD_SIZE"],
           "threads": os.environ.get("OMP_NUM_THREADS")}, open(sys.argv[1], "w"))
sys.exit(3)
"""


def test_the_script_runs_under_torchrun_with_its_arguments_and_its_exit_code(tmp_path, capfd, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script, out = tmp_path / "train.py", tmp_path / "seen.json"
    script.write_text(SCRIPT)
    code = cli_launch(build_parser().parse_args(["launch", "--nproc", "1", str(script), str(out), "--epochs", "2"]))
    seen = json.loads(out.read_text())
    assert code != 0  # torchrun reports the script's failure (exit 3) as its own non-zero exit
    assert seen == {"argv": [str(out), "--epochs", "2"], "rank": "0", "world": "1",
                    "threads": str(max(1, os.cpu_count() or 1))}
    assert f"torchwork: torchrun --standalone --nproc-per-node 1 {script}" in capfd.readouterr().err


def test_several_nodes_without_the_address_of_node_0_are_refused_before_anything_starts(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--nnodes 2 needs --master-addr"):
        cli_launch(build_parser().parse_args(["launch", "--nnodes", "2", str(tmp_path / "train.py")]))
