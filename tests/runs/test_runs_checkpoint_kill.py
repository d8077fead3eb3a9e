"""A process SIGKILLed while it writes a checkpoint leaves a run that resumes: no ``step-*.pt`` is ever
visible without its checksum (a tune worker killed as its first checkpoint appeared was once refused with
"every one fails its checksum"). The kill is a real SIGKILL, sent by the writing process to itself at the
moment named, so the test does not depend on timing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from torchwork.runs.checkpoint import CheckpointManager, remove_leftovers, verify_checkpoint

WRITER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import torch
    from torchwork.runs.checkpoint import CheckpointManager

    folder, moment = Path(sys.argv[1]), sys.argv[2]
    manager = CheckpointManager(folder, keep=3, monitor="loss")
    manager.save({"model": {"w": torch.zeros(3)}, "format_version": 1}, 1, {"loss": 2.0})
    replace = os.replace

    def replace_then_maybe_die(source, target):
        name = Path(target).name
        if moment == "before-rename" and name == "step-000000002.pt":
            os.kill(os.getpid(), signal.SIGKILL)
        replace(source, target)
        if moment == "after-rename" and name == "step-000000002.pt":
            os.kill(os.getpid(), signal.SIGKILL)

    os.replace = replace_then_maybe_die
    manager.save({"model": {"w": torch.ones(3)}, "format_version": 1}, 2, {"loss": 1.0})
""")


def killed_writer(folder, moment: str) -> None:
    done = subprocess.run([sys.executable, "-c", WRITER, str(folder), moment], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -9, done.stderr


def test_a_kill_just_before_the_checkpoint_takes_its_name_leaves_the_previous_one(tmp_path):
    folder = tmp_path / "checkpoints"
    killed_writer(folder, "before-rename")
    manager = CheckpointManager(folder)
    assert [p.name for p in manager.step_checkpoints()] == ["step-000000001.pt"]
    assert manager.newest_valid() == folder / "step-000000001.pt"
    # what the kill left: the new checkpoint's checksum and its temp file, both removed on resume
    assert (folder / "step-000000002.pt.sha256").is_file()
    removed = {p.name for p in remove_leftovers(tmp_path)}
    assert "step-000000002.pt.sha256" in removed
    assert any(name.startswith(".step-000000002.pt.") for name in removed)
    assert sorted(p.name for p in folder.iterdir()) == ["best.json", "best.pt", "best.pt.sha256",
                                                        "step-000000001.pt", "step-000000001.pt.sha256"]


def test_a_kill_just_after_the_checkpoint_takes_its_name_leaves_it_whole(tmp_path):
    folder = tmp_path / "checkpoints"
    killed_writer(folder, "after-rename")
    manager = CheckpointManager(folder)
    assert manager.newest_valid() == folder / "step-000000002.pt"
    assert verify_checkpoint(folder / "step-000000002.pt") is None


@pytest.mark.parametrize("moment", ["before-rename", "after-rename"])
def test_every_visible_checkpoint_verifies_after_a_kill(tmp_path, moment):
    folder = tmp_path / "checkpoints"
    killed_writer(folder, moment)
    for path in [*CheckpointManager(folder).step_checkpoints(), folder / "best.pt"]:
        if path.exists():
            assert verify_checkpoint(path) is None, path
