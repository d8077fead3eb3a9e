"""``torchwork resume RUN_FOLDER`` (:func:`torchwork.runs.cli.cli_resume`): start the run's recorded command
again, continuing that run.

A run folder is data: people share and download them, so nothing in it decides what program runs. The
manifest's ``command`` is read as a description and checked against the two things resume will start:

- a **torchwork invocation** (``torchwork train ...``, ``torchwork quickstart ...``, ``torchwork digits ...``):
  the recorded arguments are given to *this* interpreter's torchwork (``sys.executable -m torchwork.cli``);
  torchwork's own code runs, the arguments are data to it;
- a **Python script** (``python train.py ...``, ``torchwork launch train.py ...``): the script runs with this
  interpreter, only after the command is printed and the user confirms it (``--yes``, or ``y`` at the
  prompt on a terminal), since it is code the folder points at.

Anything else (``/bin/sh -c ...``, an unknown executable) is refused, and so is a folder with no valid
checkpoint of its own: there would be nothing to resume. The recorded ``executable`` is shown, never run.
The command starts with ``TORCHWORK_RESUME=RUN_FOLDER``, which makes ``Trainer.fit`` continue that run folder
from its newest valid checkpoint. A folder made by a later training of a script (a fine-tuning after a
pretraining, the run a kill interrupted) is resumed through the script's first run, which its lineage names
(:mod:`torchwork.runs.lineage`): each training of the script continues its own run.

On POSIX the resume process *becomes* the command (``exec``), keeping its process id: a signal sent to it
(SIGTERM from a scheduler, SIGKILL) reaches the training itself. A child process would outlive a killed
parent and go on writing into the run while the next resume starts on the same folder (found when the
quickstart's kill-and-resume test killed a resume). Windows has no such exec: the command runs as a child.

Example:
    >>> from torchwork.runs.relaunch import plan_command
    >>> plan = plan_command({"executable": "/usr/bin/python3", "argv": ["/venv/bin/torchwork", "train", "sentiment"],
    ...                      "cwd": "/"})
    >>> plan.kind, plan.argv[1:]
    ('torchwork', ['-m', 'torchwork.cli', 'train', 'sentiment'])
    >>> plan_command({"executable": "/bin/sh", "argv": ["-c", "echo hi"], "cwd": "/"})
    Traceback (most recent call last):
    ...
    torchwork.errors.CheckpointError: the run's manifest.json records the command ['/bin/sh', '-c', 'echo hi'], \
which is neither a torchwork command nor a Python script: torchwork resume runs only those. If you trust it, \
run it yourself with TORCHWORK_RESUME=RUN_FOLDER set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from torchwork.errors import CheckpointError
from torchwork.paths import read_regular
from torchwork.runs.readback import MAX_MANIFEST_BYTES

# torchwork commands that start a training run from recorded settings alone (no user code): run as recorded.
# `tune` is what a study's trial runs record: running it again continues the study, each killed trial from its
# newest checkpoint.
RUN_COMMANDS = ("train", "quickstart", "fit", "digits", "demo", "tune")  # demo: the old name of digits
# torchwork commands that run a user's script: resumed like that script, after confirmation.
SCRIPT_COMMANDS = ("launch",)
# Options of a recorded command that make it connect to another machine: a rank of a multi-node run takes
# objects from node 0 (torch.distributed's object collectives unpickle them), a study shares a database.
# Resumed only after confirmation, as a script is: the run folder names the machine, not the user.
REACHING_OPTIONS = ("--master-addr", "--storage")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclasses.dataclass
class ResumePlan:
    """What resume would run: ``argv`` (through this interpreter), in ``cwd``; ``kind`` is ``"torchwork"``
    (no confirmation needed) or ``"script"`` (runs code the run folder names: confirm first)."""

    argv: list[str]
    cwd: str
    kind: str
    script: str | None = None
    note: str | None = None
    reaches: str | None = None  # the other machine the command connects to (confirm first), if any

    def shown(self) -> str:
        """The command as printed: a password in it masked (a manifest torchwork wrote holds none)."""
        from torchwork.masking import mask_argv

        return " ".join(shlex.quote(part) for part in mask_argv(self.argv))


def reaches_out(argv: list[str]) -> str | None:
    """What a recorded torchwork command connects to beyond this machine (``--master-addr`` of another host,
    a database ``--storage`` URL), said in words (never a password); None when it stays here.

    Example:
        >>> reaches_out(["torchwork", "train", "sentiment", "--nnodes", "2", "--master-addr=10.0.0.5"])
        'node 0 at 10.0.0.5 (--master-addr)'
        >>> reaches_out(["torchwork", "tune", "sentiment", "--storage", "postgresql://me:secret@db:5432/tw"])
        'the study storage db:5432/tw (--storage)'
        >>> reaches_out(["torchwork", "train", "sentiment", "--master-addr", "127.0.0.1"]) is None
        True
    """
    found = []
    for index, part in enumerate(argv):
        option, equals, value = part.partition("=")
        if option not in REACHING_OPTIONS:
            continue
        value = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
        if option == "--master-addr" and value not in _LOOPBACK:
            found.append(f"node 0 at {value} (--master-addr)")
        elif option == "--storage" and "://" in value and not value.startswith(("sqlite:", "file:")):
            found.append(f"the study storage {value.split('@')[-1]} (--storage)")  # never the password
    return ", ".join(found) or None


def _is_torchwork_entry(path: str) -> bool:
    """``argv[0]`` of a torchwork process: the console script, or torchwork/cli.py run with ``-m``."""
    entry = Path(path)
    return entry.name == "torchwork" or (entry.name == "cli.py" and entry.parent.name == "torchwork")


def plan_command(command: dict[str, Any]) -> ResumePlan:
    """Check a manifest's ``command`` record and say what resuming it would run (never its executable)."""
    argv = command.get("argv")
    recorded = [command.get("executable"), *argv] if isinstance(argv, list) else argv
    if not isinstance(argv, list) or not argv or not all(isinstance(part, str) for part in argv):
        raise CheckpointError(f"the run's manifest.json records no command to run again (command: {command!r}).")
    _check_lengths(argv)
    if command.get("masked") is True:
        raise CheckpointError("the run's manifest.json records its command with a secret masked (a password or "
                              f"token, written as ***): {' '.join(argv)!r} cannot run as recorded. Run the command "
                              "yourself, with the secret, and TORCHWORK_RESUME=RUN_FOLDER set.")
    cwd, note = command.get("cwd"), None
    if not isinstance(cwd, str) or not Path(cwd).is_dir():
        cwd, note = os.getcwd(), f"the recorded working directory {command.get('cwd')!r} is not here: running in {os.getcwd()}"
    if _is_torchwork_entry(argv[0]) and len(argv) > 1:
        subcommand = argv[1]
        if subcommand in RUN_COMMANDS:
            return ResumePlan([sys.executable, "-m", "torchwork.cli", *argv[1:]], cwd, "torchwork", note=note,
                              reaches=reaches_out(argv))
        if subcommand in SCRIPT_COMMANDS:
            script = next((part for part in argv[2:] if part.endswith(".py")), None)
            return ResumePlan([sys.executable, "-m", "torchwork.cli", *argv[1:]], cwd, "script",
                              script=_existing_script(script, cwd) if script else None, note=note)
        raise CheckpointError(f"the run's manifest.json records `torchwork {subcommand}`, which does not start a "
                              f"training run; torchwork resume re-runs only `torchwork {'/'.join(RUN_COMMANDS)}` "
                              "or a Python script.")
    if Path(argv[0]).name == "worker.py" and Path(argv[0]).parent.name == "tune":
        raise CheckpointError("the run is a trial of a `torchwork tune` study, recorded with the command of its "
                              "worker, which cannot run alone (it needs the study's storage). Run the study's "
                              "`torchwork tune ... --study NAME` command again: it continues each killed trial "
                              "from its newest checkpoint.")
    if argv[0].endswith(".py"):
        script = _existing_script(argv[0], cwd)
        return ResumePlan([sys.executable, script, *argv[1:]], cwd, "script", script=script, note=note)
    raise CheckpointError(f"the run's manifest.json records the command {recorded!r}, which is neither a "
                          "torchwork command nor a Python script: torchwork resume runs only those. If you trust "
                          "it, run it yourself with TORCHWORK_RESUME=RUN_FOLDER set.")


MAX_ARGUMENT_CHARS = 100_000  # under Linux's 128 KiB per argument (MAX_ARG_STRLEN)
MAX_COMMAND_CHARS = 1_000_000  # under the 2 MiB the kernel allows for arguments and environment together


def _check_lengths(argv: list[str]) -> None:
    """Refuse a recorded command the kernel could not start (E2BIG), before anything is planned."""
    longest = max(argv, key=len)
    if len(longest) > MAX_ARGUMENT_CHARS or sum(map(len, argv)) > MAX_COMMAND_CHARS:
        raise CheckpointError(f"the run's manifest.json records a command with an argument of {len(longest)} "
                              f"characters ({sum(map(len, argv))} in all; at most {MAX_ARGUMENT_CHARS} per "
                              f"argument, {MAX_COMMAND_CHARS} in all): no program can be started with it. The "
                              "manifest is damaged or forged: run the training command yourself with "
                              "TORCHWORK_RESUME=RUN_FOLDER set.")


def _existing_script(script: str, cwd: str) -> str:
    path = Path(cwd, script)
    if not path.is_file():
        raise CheckpointError(f"the run was started by the script {script}, which is not at {path}: run it "
                              "yourself with TORCHWORK_RESUME=RUN_FOLDER set, from the folder it expects.")
    return str(path.resolve())


def check_resumable(run: Path) -> Path:
    """The newest valid checkpoint in ``run``'s own ``checkpoints/`` (raise if there is none)."""
    from torchwork.runs.checkpoint import CheckpointManager

    folder = run / "checkpoints"
    own = [p for p in CheckpointManager(folder).step_checkpoints()
           if p.is_file() and not p.is_symlink() and p.resolve().parent == folder.resolve()]
    if not own:
        raise CheckpointError(f"{run} has no checkpoint of its own in checkpoints/: there is nothing to resume. "
                              "Start a new run instead.")
    manager = CheckpointManager(folder)
    newest = manager.newest_valid()
    if newest is None or newest not in own:
        raise CheckpointError(f"no valid checkpoint in {folder}: every one fails its checksum. Start a new run, "
                              "or restore a copy of a checkpoint.")
    return newest


def resume_plan(run_folder: str | Path) -> tuple[Path, ResumePlan, Path]:
    """The run folder (resolved), what resuming it runs, and the checkpoint it continues from."""
    run = Path(run_folder).resolve()
    manifest_path = run / "manifest.json"
    if not manifest_path.is_file():
        raise CheckpointError(f"{run} has no manifest.json: it is not a torchwork run folder "
                              "(expected RUN_DIR/<timestamp>-<id>/).")
    try:
        manifest = json.loads(read_regular(manifest_path, MAX_MANIFEST_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise CheckpointError(f"{manifest_path} is not a manifest torchwork wrote ({error}); the run folder is "
                              "damaged.") from None
    checkpoint = check_resumable(run)
    command = manifest.get("command") if isinstance(manifest, dict) else None
    plan = plan_command(command if isinstance(command, dict) else {})
    config = manifest.get("config") if isinstance(manifest, dict) else None
    trial = config.get("tune") if isinstance(config, dict) else None
    if isinstance(trial, dict) and "study" in trial:
        note = (f"this run is trial {str(trial.get('trial'))[:40]} of the study {str(trial['study'])[:100]}: its "
                "command runs the study again, which continues this trial from its newest checkpoint unless it "
                "finished, and any other trial left")
        plan.note = f"{plan.note}; {note}" if plan.note else note
    return run, plan, checkpoint


def refuse_if_running(run: Path) -> None:
    """Refuse a run whose manifest says it is running under a process alive on this machine (the same
    process, not a reused id): two processes writing one run folder remove each other's files."""
    import socket

    from torchwork.runs.listing import run_state
    from torchwork.runs.readback import field, load_manifest_file

    manifest = load_manifest_file(run / "manifest.json")
    if run_state(manifest, run, socket.gethostname()) == "running":
        pid = field(manifest, "process.pid", int)
        raise CheckpointError(f"{run} is still running (process {pid} on this machine): stop it first, or "
                              "wait for it to end, then resume it.")
