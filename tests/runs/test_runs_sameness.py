"""A run resumes only itself: an edited script, a longer fixed schedule, a foreign checkpoint; and each of
two Trainers in one script resumes its own run after a real SIGKILL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.errors import CheckpointError
from torchwork.runs.folder import list_runs

TWO_TRAINERS = Path(__file__).with_name("two_trainers_script.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)) for _ in range(3)]


def fit(runs: Path, activation: type = nn.ReLU, lr: float = 3e-3, epochs: int = 2, schedule: str = "step",
        resume: str | None = "latest") -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), activation(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    if schedule == "onecycle":
        scheduler: object = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * 3)
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", threads=1, run_dir=runs,
                      progress=False, tensorboard=False, guard=False, config={"lr": lr})
    trainer.fit(data(), data()[:1], epochs=epochs, resume=resume)
    return trainer


def test_an_edited_script_starts_a_new_run_and_says_what_differs(tmp_path, capsys):
    first = fit(tmp_path)
    capsys.readouterr()
    edited = fit(tmp_path, activation=nn.Tanh, lr=5e-2)
    said = capsys.readouterr().err
    line = next(line for line in said.splitlines() if "not resuming" in line)
    assert "ReLU() -> (1): Tanh()" in line and "lr 0.003 -> 0.05" in line and "starting a new run" in line
    assert edited.run_path != first.run_path and len(list_runs(tmp_path)) == 2
    assert edited.global_step == 6  # trained from scratch, not the old run's weights under a new model
    again = fit(tmp_path, activation=nn.Tanh, lr=5e-2)  # the same script again: it is that run, finished
    assert again.run_path == edited.run_path and again.global_step == 6


def test_more_epochs_continue_the_run_unless_its_schedule_has_a_fixed_end(tmp_path, capsys):
    fit(tmp_path / "a", epochs=2)
    longer = fit(tmp_path / "a", epochs=3)
    assert len(list_runs(tmp_path / "a")) == 1 and longer.global_step == 9
    manifest = json.loads((longer.run_path / "manifest.json").read_text())
    assert manifest["resumes"][-1]["epochs"] == 3
    fit(tmp_path / "b", epochs=2, schedule="onecycle")
    with pytest.raises(CheckpointError, match=r"planned for 2 epochs and its OneCycleLR schedule ends after "
                                              r"total_steps=6 steps.*start a new run"):
        fit(tmp_path / "b", epochs=3, schedule="onecycle")


def test_a_checkpoint_copied_from_another_run_is_not_resumed(tmp_path, capsys):
    a = fit(tmp_path / "a")
    b = fit(tmp_path / "b", lr=1e-3, epochs=1)
    for checkpoint in (a.run_path / "checkpoints").glob("step-*"):
        shutil.copy(checkpoint, b.run_path / "checkpoints" / checkpoint.name)
    capsys.readouterr()
    again = fit(tmp_path / "b", lr=1e-3, epochs=1)
    assert f"was written by run {a.run_path.name}, not by {b.run_path.name}" in capsys.readouterr().err
    assert again.run_path != b.run_path and again.global_step == 3
    with pytest.raises(CheckpointError, match="a run resumes only itself"):
        fit(tmp_path / "b", lr=1e-3, epochs=1, resume=str(b.run_path))


def run_two(runs: Path, out: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TWO_TRAINERS), str(runs), str(out), *extra], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def uninterrupted_two(tmp_path_factory) -> dict:
    """The two Trainers' script run once without a kill: the weights every resumed run must equal."""
    root = tmp_path_factory.mktemp("uninterrupted")
    plain = run_two(root / "runs", root / "plain.pt")
    assert plain.returncode == 0, plain.stderr
    return torch.load(root / "plain.pt", weights_only=True)


@pytest.mark.slow
def test_each_of_two_trainers_resumes_its_own_run_after_sigkill(tmp_path, uninterrupted_two):
    runs, out = tmp_path / "runs", tmp_path / "out.pt"
    killed = run_two(runs, out, "--kill-at", "5")
    assert killed.returncode == -signal.SIGKILL
    (outer,) = list_runs(runs)
    (inner,) = list_runs(outer / "finetune")
    resumed = run_two(runs, out, env={"TORCHWORK_RESUME": str(outer)})
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {outer} from step-000000012.pt" in resumed.stderr
    assert f"resuming {inner} from step-000000004.pt" in resumed.stderr
    result, expected = torch.load(out, weights_only=True), uninterrupted_two
    assert result["runs"] == [str(outer), str(inner)] and result["steps"] == expected["steps"] == [12, 18]
    for key, value in expected["model"].items():
        assert torch.equal(result["model"][key], value), key



@pytest.mark.slow
@pytest.mark.parametrize("first_keeps_a_run", [True, False], ids=["first-restored", "first-re-run"])
def test_torchwork_resume_of_the_killed_second_trainer_s_run_resumes_each_its_own(tmp_path, uninterrupted_two,
                                                                                   first_keeps_a_run):
    """Issue 49, item 10: the process is SIGKILLed during the second Trainer; `torchwork resume` names the run
    the kill interrupted (the second's, as a Ctrl-C's message would). The first Trainer used to be handed that
    run and refuse it. Now the first restores its finished run from its final checkpoint (or, keeping none,
    trains again from its start), the second continues its own, and the weights equal an uninterrupted run's."""
    runs, out = tmp_path / "runs", tmp_path / "out.pt"
    flags = () if first_keeps_a_run else ("--first-keeps-no-run",)
    killed = run_two(runs, out, *flags, env={"TWO_TRAINERS_KILL_AT": "5"})  # not in the recorded command
    assert killed.returncode == -signal.SIGKILL
    (second,) = list_runs(list_runs(runs)[0] / "finetune" if first_keeps_a_run else runs / "finetune")
    resumed = subprocess.run([sys.executable, "-m", "torchwork.cli", "resume", str(second), "--yes"],
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                             env={**os.environ, "PYTHONPATH": str(SRC)})
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {second} from step-000000004.pt (step 4" in resumed.stderr
    if first_keeps_a_run:
        (first,) = list_runs(runs)
        assert f"resuming {first} from step-000000012.pt (step 12, after epoch 2)" in resumed.stderr
        assert len(list_runs(first / "finetune")) == 1  # no new run for either
    result = torch.load(out, weights_only=True)
    assert result["steps"] == uninterrupted_two["steps"] == [12, 18]
    assert result["runs"][1] == str(second)
    for key, value in uninterrupted_two["model"].items():
        assert torch.equal(result["model"][key], value), key


def fit_on(runs: Path, labels: torch.Tensor, resume: str | Path | None = "latest") -> Trainer:
    torch.manual_seed(0)
    features = torch.randn(24, 4, generator=torch.Generator().manual_seed(1))
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(features, labels), batch_size=8)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), device="cpu",
                      threads=1, run_dir=runs, progress=False, tensorboard=False, guard=False)
    trainer.fit(train, epochs=1, resume=resume)
    return trainer


def test_data_changed_since_the_run_was_recorded_is_named_and_not_resumed(tmp_path, capsys):
    labels = torch.arange(24) % 2
    first = fit_on(tmp_path, labels)
    same = fit_on(tmp_path, labels.clone())  # the same rows: the run, finished, resumed as it is
    assert same.run_path == first.run_path
    relabelled = labels.clone()
    relabelled[5] = 1 - relabelled[5]  # one row's label corrected, the sizes unchanged
    capsys.readouterr()
    with pytest.raises(CheckpointError, match=r"data: the train split changed since the run was recorded "
                                              r"\(24 -> 24 rows: 1 relabelled\).*a run resumes only itself"):
        fit_on(tmp_path, relabelled, resume=first.run_path)
    again = fit_on(tmp_path, relabelled)  # resume="latest": a new run, and why
    assert again.run_path != first.run_path and len(list_runs(tmp_path)) == 2
    assert "not resuming" in capsys.readouterr().err


def test_a_changed_model_structure_is_said_with_its_parentheses_closed() -> None:
    """`Linear(...) -> Sequential(` left the message's own parenthesis unclosed, and read as `Sequential()`."""
    from torchwork.runs.sameness import _structure_difference

    old, new = repr(torch.nn.Linear(4, 2)), repr(torch.nn.Sequential(torch.nn.Linear(4, 2)))
    said = _structure_difference(old, new)
    assert said == "model structure: Linear(in_features=4, out_features=2, bias=True) -> Sequential(...)"
    assert said.count("(") == said.count(")")
