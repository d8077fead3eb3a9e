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


LINES_SCRIPT = """import sys
from torchwork.distributed.env import world_from_env
from torchwork.distributed.setup import init_process_group
world = world_from_env()
init_process_group(world)
for i in range(2000):
    print(f"rank{world.rank} line {i:05d} " + "x" * 150)
    print(f"rank{world.rank} note {i:05d} " + "y" * 150, file=sys.stderr)
"""


def test_two_ranks_printing_at_once_never_split_each_others_lines(tmp_path) -> None:
    """Under PYTHONUNBUFFERED (Docker images, pytest-xdist workers) print wrote a line's text and its newline
    apart, and the other rank's line landed between them: 'rank0 line 02616 xxxrank1 line 00000 xxx'."""
    import re
    import subprocess
    import sys

    script = tmp_path / "lines.py"
    script.write_text(LINES_SCRIPT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "launch", "--nproc", "2", str(script)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for stream, word, fill in ((done.stdout, "line", "x"), (done.stderr, "note", "y")):
        lines = [line for line in stream.splitlines() if line.startswith("rank") or fill * 20 in line]
        whole = re.compile(rf"rank[01] {word} \d{{5}} {fill}{{150}}")
        broken = [line[:60] for line in lines if not whole.fullmatch(line)]
        assert len(lines) == 4000 and not broken, broken[:3]
