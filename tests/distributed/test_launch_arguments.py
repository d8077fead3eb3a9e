"""distributed/launch.py: ``torchwork launch`` checks every argument before torchrun starts, so a typo is one
line naming the flag (exit 2), not torchrun's traceback: the process and machine counts, this machine's rank,
the port, and the script, which must be a regular file."""

from __future__ import annotations

import pytest

from torchwork.cli import main
from torchwork.distributed.launch import torchrun_command
from torchwork.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_torchrun(monkeypatch) -> None:
    """Nothing here may start torchrun: a check missed fails the test at once instead."""
    import subprocess

    def refused(*args, **kwargs):
        raise AssertionError("torchrun started: the bad argument was not refused first")

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    monkeypatch.setattr(subprocess, "run", refused)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("print('never run')\n")
    return path


@pytest.mark.parametrize(("counts", "message"), [
    ({"nproc": 0}, r"^--nproc 0: need at least one process per node\.$"),
    ({"nproc": -3}, r"^--nproc -3: need at least one process per node\.$"),
    ({"nproc": 10**6}, r"^--nproc 1000000: at most \d+ processes on this machine"),
    ({"nproc": 1, "nnodes": 0}, r"^--nnodes 0: need at least one machine \(1 for this one alone\)\.$"),
    ({"nproc": 1, "nnodes": -1}, r"^--nnodes -1: need at least one machine"),
    ({"nproc": 1, "nnodes": 2, "node_rank": 2}, r"^--node-rank 2 must be in \[0, 2\)"),
    ({"nproc": 1, "nnodes": 2, "node_rank": -1}, r"^--node-rank -1 must be in \[0, 2\)"),
    ({"nproc": 1, "master_port": 99999}, r"^--master-port 99999: use a TCP port in 1\.\.65535"),
    ({"nproc": 1, "master_port": 0}, r"^--master-port 0: use a TCP port"),
    ({"nproc": 0, "nnodes": 0, "master_port": -1}, r"^--nproc 0: .*; --nnodes 0: .*; --master-port -1: "),
])
def test_bad_counts_ranks_and_ports_are_refused_each_by_its_flag(counts, message) -> None:
    from torchwork.distributed.launch import check_launch

    with pytest.raises(ConfigError, match=message):
        check_launch(**counts)


def test_the_most_processes_is_at_least_sixteen() -> None:
    from torchwork.distributed.launch import check_launch, most_processes

    assert most_processes() >= 16
    check_launch(most_processes())  # the cap itself is allowed


def test_a_script_that_is_missing_or_a_directory_is_refused(tmp_path, script) -> None:
    with pytest.raises(ConfigError, match=r"nonexist\.py: no such file; give the path of the training script"):
        torchrun_command(str(tmp_path / "nonexist.py"), [], nproc=1)
    with pytest.raises(ConfigError, match=r"is a directory; give the training script inside it"):
        torchrun_command(str(tmp_path), [], nproc=1)
    assert torchrun_command(str(script), [], nproc=1)[-1] == str(script)
    assert torchrun_command("-m", ["torchwork.cli"], nproc=2)[-2:] == ["-m", "torchwork.cli"]  # a module


@pytest.mark.parametrize(("argv", "message"), [
    (["--nproc", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", "99999"],
     "--master-port 99999: use a TCP port in 1..65535"),
    (["--nproc", "1", "--nnodes", "0"], "--nnodes 0: need at least one machine"),
    (["--nproc", "1", "--nnodes", "-1"], "--nnodes -1: need at least one machine"),
])
def test_the_launch_command_says_it_in_one_line_before_torchrun(capsys, script, argv,
                                                                 message) -> None:
    assert main(["launch", *argv, str(script)]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith(f"torchwork: error: {message}") and "torchrun" not in captured.err


def test_a_missing_script_is_one_line_not_torchruns_traceback(capsys, tmp_path) -> None:
    assert main(["launch", "--nproc", "1", str(tmp_path / "nonexist.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file; give the path of the training script" in err
