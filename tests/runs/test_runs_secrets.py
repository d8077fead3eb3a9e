"""No secret reaches a run folder or a terminal: a password given on the command line (a storage URL's
``user:pw@``, ``:pw@``, ``?password=``, ``--token X``) is masked in the manifest's ``command.argv`` and in
everything a run writes, and ``runs show`` / ``runs diff`` print it masked even from a manifest that holds it
in clear (recorded before masking)."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from runs_helpers import git_repo, tiny_fit

from torchwork.cli import main
from torchwork.errors import CheckpointError
from torchwork.masking import mask_argv, mask_secrets
from torchwork.runs.relaunch import plan_command

SECRET = "Hunter2xyz"
ARGV = ["/venv/bin/torchwork", "tune", "sentiment", "--storage", f"postgresql://tuner:{SECRET}1@db:5432/studies",
        f"--dashboard=mysql://:{SECRET}2@db/x", f"sqlite:///s.db?mode=ro&PASSWORD={SECRET}3", "--token",
        f"{SECRET}4", f"--api-key={SECRET}5", f"https://h/p?pwd={SECRET}6&secret={SECRET}7&Api_Key={SECRET}8"]


@pytest.fixture(autouse=True)
def _passive_waiting(monkeypatch):
    """The command sets OMP_WAIT_POLICY when torch is not imported yet: set here, so that the test leaves the
    environment as it found it."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")


@pytest.mark.parametrize("text, expected", [
    ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql+psycopg2://:pw@h/db", "postgresql+psycopg2://:***@h/db"),
    ("error at 'mysql://u:p@ss@h/db': refused", "error at 'mysql://u:***@h/db': refused"),
    ("x://h/db?sslmode=require&password=pw", "x://h/db?sslmode=require&password=***"),
    ("x://h/?Token=a;KEY=b&monkey=c&client_secret=d", "x://h/?Token=***;KEY=***&monkey=c&client_secret=***"),
    ("postgresql://u@h/db and lr=0.1", "postgresql://u@h/db and lr=0.1"),
])
def test_mask_secrets_hides_every_kind_of_url_secret(text, expected):
    assert mask_secrets(text) == expected


def test_mask_argv_hides_urls_in_both_flag_forms_and_secret_flags_values():
    masked = mask_argv(ARGV)
    assert SECRET not in " ".join(masked)
    assert masked[3:6] == ["--storage", "postgresql://tuner:***@db:5432/studies", "--dashboard=mysql://:***@db/x"]
    assert masked[7:10] == ["--token", "***", "--api-key=***"]
    assert mask_argv(["train", "--sort", "key", "--lr", "0.1"]) == ["train", "--sort", "key", "--lr", "0.1"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two real runs started with secrets on their command line."""
    base = tmp_path_factory.mktemp("secrets")
    work_tree = git_repo(base / "project", {"train.py": "print('train')\n"})  # its own code: no patch of ours
    saved, cwd = sys.argv[:], os.getcwd()
    sys.argv[:] = ARGV
    os.chdir(work_tree)
    try:
        runs = [tiny_fit(base / "runs", seed=0, lr=lr, epochs=1).run_path for lr in (0.05, 0.1)]
    finally:
        sys.argv[:] = saved
        os.chdir(cwd)
    return runs


def test_no_file_of_a_run_folder_holds_the_secret(recorded):
    for run in recorded:
        files = [p for p in run.rglob("*") if p.is_file()]
        assert any(p.name == "manifest.json" for p in files)
        assert [p for p in files if SECRET.encode() in p.read_bytes()] == []
        command = json.loads((run / "manifest.json").read_text())["command"]
        assert command["masked"] is True and command["argv"][4] == "postgresql://tuner:***@db:5432/studies"


def test_runs_show_and_diff_print_no_secret_even_from_a_manifest_holding_it(recorded, tmp_path, capsys):
    recorded = [shutil.copytree(run, tmp_path / run.name) for run in recorded]
    manifest_path = recorded[1] / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["command"]["argv"] = ARGV + ["--again"]  # as a run recorded before masking would hold it
    manifest["error"] = f"OperationalError: could not connect to postgresql://u:{SECRET}9@db/x"
    manifest_path.write_text(json.dumps(manifest))
    for args in (["show", str(recorded[1])], ["show", "--json", str(recorded[1])],
                 ["diff", *map(str, recorded)], ["diff", "--json", *map(str, recorded)]):
        assert main(["runs", *args]) == 0
        out = capsys.readouterr().out
        assert SECRET not in out
        assert "postgresql://u:***@db/x" in out or args[0] == "diff"


def test_resume_refuses_a_command_recorded_with_a_masked_secret(tmp_path):
    with pytest.raises(CheckpointError, match="secret masked"):
        plan_command({"argv": mask_argv(["/v/bin/torchwork", "train", "x", "--token", "abc"]), "masked": True,
                      "cwd": str(tmp_path), "executable": sys.executable})
