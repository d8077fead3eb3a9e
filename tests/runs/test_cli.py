"""runs/cli.py in this process: ``torchwork resume`` refuses, before anything runs, a recorded Python script
it was not told to run (``--yes``; no terminal to ask on) and a folder without a checkpoint of its own, and
``torchwork runs ls`` reads run folders back (no folder: no rows). The resumed process itself (exec, the
interpreter, a kill reaching the training) is in tests/runs/test_runs_relaunch.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torchwork.cli import build_parser
from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import save_checkpoint
from torchwork.runs.cli import cli_main, cli_resume


def _run_folder(root: Path, command: dict, checkpoint: bool = True) -> Path:
    run = root / "runs" / "20260101T000000Z-abcdef"
    (run / "checkpoints").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"command": command}))
    if checkpoint:
        save_checkpoint({"format_version": 1, "model": {"w": torch.zeros(2)}}, run / "checkpoints" / "step-000000004.pt")
    return run


def test_a_recorded_script_is_not_run_without_yes_and_the_plan_is_printed(tmp_path, capsys) -> None:
    ran = tmp_path / "script-ran"
    (tmp_path / "train.py").write_text(f"open({str(ran)!r}, 'w')\n")
    run = _run_folder(tmp_path, {"argv": ["train.py"], "cwd": str(tmp_path)})
    with pytest.raises(CheckpointError, match="not confirmed: nothing was run"):
        cli_resume(build_parser().parse_args(["resume", str(run)]))
    said = capsys.readouterr().err
    assert f"resuming {run.resolve()} from step-000000004.pt" in said and "run it only if you trust" in said
    assert not ran.exists()


def test_a_folder_without_a_checkpoint_is_refused_before_anything_runs(tmp_path) -> None:
    ran = tmp_path / "script-ran"
    (tmp_path / "train.py").write_text(f"open({str(ran)!r}, 'w')\n")
    run = _run_folder(tmp_path, {"argv": ["train.py"], "cwd": str(tmp_path)}, checkpoint=False)
    with pytest.raises(CheckpointError, match="no checkpoint of its own"):
        cli_resume(build_parser().parse_args(["resume", str(run), "--yes"]))
    assert not ran.exists()


def test_runs_ls_lists_a_folder_of_runs_and_an_empty_one_as_no_rows(tmp_path, capsys) -> None:
    _run_folder(tmp_path, {"argv": ["train.py"], "cwd": str(tmp_path)})
    assert cli_main(build_parser().parse_args(["runs", "ls", str(tmp_path / "runs"), "--json"])) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(row["name"], row["state"]) for row in rows] == [("20260101T000000Z-abcdef", "unknown")]
    (tmp_path / "none").mkdir()
    assert cli_main(build_parser().parse_args(["runs", "ls", str(tmp_path / "none"), "--json"])) == 0
    assert json.loads(capsys.readouterr().out) == []
