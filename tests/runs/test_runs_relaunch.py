"""`torchwork resume` treats a run folder as data: it never runs a program the manifest names.

Every case runs the real CLI in a subprocess against a run folder written here; each payload would create a
marker file if it ran.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import save_checkpoint
from torchwork.runs.relaunch import plan_command

SRC = Path(__file__).resolve().parents[2] / "src"


def run_folder(root: Path, command: dict, checkpoint: bool = True) -> Path:
    run = root / "20260101T000000Z-abcdef"
    (run / "checkpoints").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"command": command}))
    if checkpoint:
        save_checkpoint({"format_version": 1, "model": {"w": torch.zeros(2)}}, run / "checkpoints" / "step-000000004.pt")
    return run


def resume(run: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "torchwork.cli", "resume", str(run), *flags], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


def shell_payload(tmp_path: Path, marker: Path) -> Path:
    """An executable file that creates ``marker`` when run."""
    payload = tmp_path / "payload.sh"
    payload.write_text(f"#!/bin/sh\ntouch {marker}\n")
    payload.chmod(payload.stat().st_mode | stat.S_IEXEC)
    return payload


@pytest.mark.parametrize("checkpoint", [True, False], ids=["with-checkpoint", "without-checkpoint"])
def test_a_shell_command_in_the_manifest_never_runs(tmp_path, checkpoint):
    marker = tmp_path / "pwned"
    run = run_folder(tmp_path, {"executable": "/bin/sh", "argv": ["-c", f"touch {marker}"], "cwd": str(tmp_path)},
                     checkpoint)
    for flags in ((), ("--yes",)):
        done = resume(run, *flags)
        assert done.returncode == 2, done.stderr
        assert not marker.exists(), "the manifest's command was executed"
        expected = "neither a torchwork command nor a Python script" if checkpoint else "no checkpoint of its own"
        assert expected in done.stderr


def test_the_recorded_executable_is_never_run_for_a_torchwork_command(tmp_path):
    marker = tmp_path / "pwned"
    run = run_folder(tmp_path, {"executable": str(shell_payload(tmp_path, marker)),
                                "argv": ["/elsewhere/bin/torchwork", "train", "no-such-recipe"], "cwd": str(tmp_path)})
    done = resume(run)
    assert not marker.exists()
    # this interpreter's torchwork ran the recorded arguments: its own error about the recipe
    assert done.returncode == 2 and "unknown recipe 'no-such-recipe'" in done.stderr, done.stderr
    assert f"{sys.executable} -m torchwork.cli train no-such-recipe" in done.stderr


def test_a_python_script_runs_only_when_confirmed_and_with_this_interpreter(tmp_path):
    marker, ran = tmp_path / "pwned", tmp_path / "script-ran.json"
    script = tmp_path / "train.py"
    script.write_text("import json, os, sys\n"
                      f"open({str(ran)!r}, 'w').write(json.dumps([sys.executable, os.environ['TORCHWORK_RESUME']]))\n")
    run = run_folder(tmp_path, {"executable": str(shell_payload(tmp_path, marker)), "argv": ["train.py"],
                                "cwd": str(tmp_path)})
    refused = resume(run)
    assert refused.returncode == 2 and not ran.exists() and not marker.exists()
    assert f"{sys.executable} {script}" in refused.stderr and "pass --yes" in refused.stderr
    done = resume(run, "--yes")
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert json.loads(ran.read_text()) == [sys.executable, str(run.resolve())]


@pytest.mark.parametrize(("options", "said"), [
    (["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.9.8.7"], "node 0 at 10.9.8.7 (--master-addr)"),
    (["--storage=postgresql://me:secret@db.example:5432/tw"], "the study storage db.example:5432/tw (--storage)"),
], ids=["other-master", "database-storage"])
def test_a_command_that_connects_to_another_machine_runs_only_when_confirmed(tmp_path, options, said):
    run = run_folder(tmp_path, {"executable": sys.executable, "cwd": str(tmp_path),
                                "argv": ["/usr/bin/torchwork", "train", "no-such-recipe", *options]})
    refused = resume(run)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert f"this command connects to {said}" in refused.stderr and "secret" not in refused.stderr
    assert "unknown recipe" not in refused.stderr  # nothing was run
    confirmed = resume(run, "--yes")  # the recorded arguments then run: their own error, no recipe of that name
    ran = confirmed.stderr.split("run it only if")[-1]
    assert confirmed.returncode == 2 and ("unknown recipe" in ran or "torchwork train: error" in ran), ran


def test_a_fit_run_is_resumed_as_recorded_and_a_local_master_needs_no_confirmation(tmp_path):
    python = {"executable": "/usr/bin/python3", "cwd": str(tmp_path)}
    plan = plan_command({**python, "argv": ["torchwork", "fit", "reviews.csv", "--quick"]})
    assert (plan.kind, plan.argv, plan.reaches) == ("torchwork", [sys.executable, "-m", "torchwork.cli", "fit",
                                                                  "reviews.csv", "--quick"], None)
    plan = plan_command({**python, "argv": ["torchwork", "train", "sentiment", "--master-addr", "127.0.0.1",
                                            "--storage", "sqlite:///runs/study.db"]})
    assert plan.reaches is None


@pytest.mark.skipif(os.name != "posix", reason="exec keeps the process id on POSIX only")
def test_the_resumed_command_runs_in_the_resume_process_itself_so_a_kill_reaches_it(tmp_path):
    """A resume that started a child would leave it training on when the resume is killed (SIGKILL, or a
    scheduler's SIGTERM), and the next resume would run beside it on the same folder."""
    ran = tmp_path / "script-ran.json"
    (tmp_path / "train.py").write_text("import json, os, time\n"
                                       f"open({str(ran)!r}, 'w').write(json.dumps(os.getpid()))\n"
                                       "time.sleep(60)\n")
    run = run_folder(tmp_path, {"argv": ["train.py"], "cwd": str(tmp_path)})
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    process = subprocess.Popen([sys.executable, "-m", "torchwork.cli", "resume", str(run), "--yes"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (ran.exists() and ran.read_text()) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ran.exists(), process.stderr.read().decode() if process.poll() is not None else "the script never ran"
        assert json.loads(ran.read_text()) == process.pid
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL  # the training itself died: nothing is left running
    finally:
        process.kill()
        process.wait()
        process.stderr.close()


def test_a_run_still_running_on_this_machine_is_refused_and_one_whose_process_died_is_resumed(tmp_path):
    import socket

    from torchwork.runs.record import now

    ran = tmp_path / "script-ran"
    (tmp_path / "train.py").write_text(f"open({str(ran)!r}, 'w')\n")
    run = run_folder(tmp_path, {"argv": ["train.py"], "cwd": str(tmp_path)})
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        running = {"command": {"argv": ["train.py"], "cwd": str(tmp_path)}, "state": "running", "started": now(),
                   "process": {"pid": alive.pid, "host": socket.gethostname()}}
        (run / "manifest.json").write_text(json.dumps(running))
        done = resume(run, "--yes")
        assert done.returncode == 2 and not ran.exists(), done.stderr
        assert f"is still running (process {alive.pid} on this machine): stop it first" in done.stderr
    finally:
        alive.kill()
        alive.wait()
    done = resume(run, "--yes")  # the same manifest, its process gone (killed): resumed
    assert done.returncode == 0 and ran.exists(), done.stderr


def test_a_folder_without_a_valid_checkpoint_is_refused_before_anything_runs(tmp_path):
    ran = tmp_path / "script-ran"
    (tmp_path / "train.py").write_text(f"open({str(ran)!r}, 'w')\n")
    run = run_folder(tmp_path, {"argv": ["train.py"], "cwd": str(tmp_path)})
    (run / "checkpoints" / "step-000000004.pt").write_bytes(b"garbage")
    done = resume(run, "--yes")
    assert done.returncode == 2 and "no valid checkpoint" in done.stderr and not ran.exists()


def test_plans_for_recorded_commands(tmp_path):
    python = {"executable": "/usr/bin/python3", "cwd": str(tmp_path)}
    plan = plan_command({**python, "argv": [str(SRC / "torchwork" / "cli.py"), "train", "cfg.yaml", "--set", "lr=0.1"]})
    assert (plan.kind, plan.argv) == ("torchwork", [sys.executable, "-m", "torchwork.cli", "train", "cfg.yaml",
                                                    "--set", "lr=0.1"])
    (tmp_path / "ddp.py").write_text("")
    plan = plan_command({**python, "argv": ["torchwork", "launch", "--nproc", "2", "ddp.py"]})
    assert plan.kind == "script" and plan.script == str(tmp_path / "ddp.py")
    with pytest.raises(CheckpointError, match="does not start a training run"):
        plan_command({**python, "argv": ["torchwork", "doctor", "x.py"]})
    with pytest.raises(CheckpointError, match="not at"):
        plan_command({**python, "argv": ["missing.py"]})
    with pytest.raises(CheckpointError, match="records no command"):
        plan_command({**python, "argv": "rm -rf /"})


def test_a_200_kb_recorded_argument_is_refused_with_a_message(tmp_path):
    run = run_folder(tmp_path, {"executable": sys.executable, "argv": ["/venv/bin/torchwork", "train", "x" * 200_000],
                                "cwd": str(tmp_path)})
    done = resume(run)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "an argument of 200000 characters" in done.stderr
