"""A user's own objective (``torchwork.tune.tune_objective``), run by real worker processes that load it by
name: seeded params, pruning, and a real SIGKILL of a worker resumed bit-exact from the trial's checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from objective_helpers import SPACE, finish, start, tune_script, write_objective
from tune_helpers import environment, outcome, study_folder, trials_of

from torchwork.errors import ConfigError


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = tmp_path_factory.mktemp("objective-reference")
    finish(folder, start(folder, "ref"), "ref")
    return outcome(folder / "runs", "ref")


@pytest.mark.slow(reason="a study's worker killed mid-trial, resumed, against an uninterrupted study")
def test_a_killed_worker_of_a_user_objective_is_resumed_bit_exact(reference, tmp_path) -> None:
    process = start(tmp_path, "kill", epoch_s=1.0)
    try:
        killed = None
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "kill.log").read_text()[-3000:]
            for info_path in sorted(study_folder(tmp_path / "runs", "kill").glob("trials/*/trial.json")):
                info = json.loads(info_path.read_text() or "{}")
                if info.get("state") == "RUNNING" and list(info_path.parent.glob("*/checkpoints/step-*.pt")):
                    killed = int(info["trial"])
            time.sleep(0.1)
        assert killed is not None, "no trial wrote a checkpoint in time"
        (worker,) = psutil.Process(process.pid).children()
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        if process.poll() is None and killed is None:
            process.kill()
    finish(tmp_path, process, "kill")
    assert "worker 0 stopped (killed by SIGKILL)" in (tmp_path / "kill.log").read_text()
    assert outcome(tmp_path / "runs", "kill") == reference  # params, scores and every epoch's score, bit for bit
    assert not {t.state.name for t in trials_of(tmp_path / "runs", "kill")} & {"RUNNING", "WAITING"}
    info = json.loads((study_folder(tmp_path / "runs", "kill") / "trials" / str(killed) / "trial.json").read_text())
    assert info["attempt"] == 1 and info["resumed_epochs"] >= 1 and info["resumed_from"], info


def test_two_workers_try_the_same_params_and_pruned_trials_are_marked(reference, tmp_path) -> None:
    finish(tmp_path, start(tmp_path, "two", trials=8, workers=2, pruner="percentile"), "two")
    found = outcome(tmp_path / "runs", "two")
    assert {n: o["params"] for n, o in found.items() if n < 3} == {n: o["params"] for n, o in reference.items()}
    pruned = [n for n, o in found.items() if o["state"] == "PRUNED"]
    assert pruned, found  # trials 0, 2, 4 and 6 have lrs far too small to fit in 3-4 epochs
    folder = study_folder(tmp_path / "runs", "two")
    info = json.loads((folder / "trials" / str(pruned[0]) / "trial.json").read_text())
    assert info["state"] == "PRUNED" and info["threads"] == 1
    assert info["epochs"] == info["pruned_at_epoch"] < found[pruned[0]]["params"]["epochs"]  # from 1
    # the run folder says so too (`torchwork runs ls` listed pruned trials as finished)
    assert json.loads((folder / info["run"] / "manifest.json").read_text())["state"] == "pruned"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["objective"] == "val_loss" and summary["direction"] == "minimize" and summary["workers"] == 2
    assert summary["best_value"] == min(o["value"] for o in found.values() if o["state"] == "COMPLETE")
    assert "objective: my_objective.py:objective" in (folder / "best.yaml").read_text()


def test_an_objective_that_trains_no_trainer_of_the_trial_fails_its_trial_with_the_reason(tmp_path) -> None:
    write_objective(tmp_path)
    script = tune_script("bare", 1, 1, "none").replace("my_objective.py:objective", "my_objective.py:untrained")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environment(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads((study_folder(tmp_path / "runs", "bare") / "trials" / "0" / "trial.json").read_text())
    assert info["state"] == "FAIL" and "run_dir=trial.run_dir and callbacks=trial.callbacks" in info["error"]


@pytest.mark.parametrize(("name", "message"), [
    ("my_objective.py:missing", "has no function 'missing'"),
    ("nowhere.py:objective", "objective file nowhere.py does not exist"),
    ("objective", "is not an objective: write path/to/file.py:function"),
])
def test_a_bad_objective_name_is_refused_before_anything_is_written(tmp_path, monkeypatch, name, message) -> None:
    from torchwork.tune import tune_objective

    write_objective(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=message):
        tune_objective(name, SPACE, 2, metric="val_loss", run_dir="runs")
    assert not (tmp_path / "runs").exists()


def test_a_bad_direction_or_a_tuner_setting_is_refused(tmp_path, monkeypatch) -> None:
    from torchwork.tune import tune_objective

    write_objective(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="direction 'lowest': use maximize or minimize"):
        tune_objective("my_objective.py:objective", SPACE, 2, metric="val_loss", direction="lowest")
    with pytest.raises(ConfigError, match="'seed' cannot be tuned"):
        tune_objective("my_objective.py:objective", {**SPACE, "seed": {"choices": [0, 1]}}, 2, metric="val_loss")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("returned", "shown"), [(float("nan"), "nan"), (10**400, "<an integer of 401 digits or so>"),
                                                 ("0.5", "'0.5'")], ids=["nan", "10**400", "text"])
def test_an_objective_that_returns_no_finite_number_fails_its_trial_by_name(tmp_path, returned, shown) -> None:
    from torchwork.tune.objective import ObjectiveTarget

    (tmp_path / "scores.py").write_text("def objective(trial):\n    return RETURNED\n")
    target = ObjectiveTarget(f"{tmp_path / 'scores.py'}:objective", "val_loss", run_dir=tmp_path / "runs")
    target.function = lambda setup: returned  # what the user's function handed back
    record = {"tune": {"trial": 0}}
    with pytest.raises(ConfigError, match=f"returned {re.escape(shown)}: it must return the trial's score"):
        target.run({}, tmp_path / "trial", 1, [], record)  # 10**400 raised OverflowError in math.isfinite
