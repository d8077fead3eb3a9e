"""Crash safety with real SIGKILLs: a killed worker's trial, and a killed whole study, continue from the last
checkpoint and end bit-exact with an uninterrupted study of the same seed; no epoch lost or reported twice,
no trial left RUNNING."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from tune_helpers import environment, outcome, run_tune, study_folder, trial_json, trials_of, tune_command


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    runs = tmp_path_factory.mktemp("uninterrupted") / "runs"
    run_tune(runs, "ref")
    return outcome(runs, "ref")


def wait_for_a_checkpointed_running_trial(folder: Path, process: subprocess.Popen, timeout: float = 300) -> int:
    """The number of a trial that is running and has written at least one checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the study ended before a trial could be killed"
        for info_path in sorted((folder / "trials").glob("*/trial.json")):
            try:
                info = json.loads(info_path.read_text())
            except ValueError:
                continue
            if info.get("state") == "RUNNING" and list(info_path.parent.glob("*/checkpoints/step-*.pt")):
                return int(info["trial"])
        time.sleep(0.1)
    raise AssertionError("no trial wrote a checkpoint in time")


def attempts(runs: Path, study: str) -> dict[int, int]:
    found: dict[int, int] = {}
    for trial in trials_of(runs, study):
        found[trial.user_attrs["trial"]] = found.get(trial.user_attrs["trial"], 0) + 1
    return found


def check_equal_to_reference(runs: Path, study: str, reference: dict, killed: int) -> None:
    got = outcome(runs, study)
    # a failed trial's own error (its trial.json) is in the message: a fresh-clone run on 6 Dec saw trial 0 FAIL
    # once after the kill and resume, and passed 5 times of 5 rerun alone or three at a time
    failed = {n: trial_json(runs, study, n).get("error") for n, o in got.items() if o["state"] == "FAIL"}
    assert got == reference, failed  # states, params, scores and every epoch's score, bit for bit
    states = {t.state.name for t in trials_of(runs, study)}
    assert "RUNNING" not in states and "WAITING" not in states
    counts = attempts(runs, study)
    assert counts[killed] == 2, counts
    info = trial_json(runs, study, killed)
    assert info["attempt"] == 1 and info["resumed_epochs"] >= 1 and info["resumed_from"], info


def test_a_killed_worker_is_resumed_bit_exact(reference, tmp_path) -> None:
    runs = tmp_path / "runs"
    log = (tmp_path / "tune.log").open("w")
    process = subprocess.Popen(tune_command(runs, "kw"), env=environment(), stdout=log, stderr=subprocess.STDOUT)
    try:
        killed = wait_for_a_checkpointed_running_trial(study_folder(runs, "kw"), process)
        (worker,) = psutil.Process(process.pid).children()
        os.kill(worker.pid, signal.SIGKILL)
        assert process.wait(timeout=600) == 0, (tmp_path / "tune.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
    assert "worker 0 stopped (killed by SIGKILL)" in (tmp_path / "tune.log").read_text()
    check_equal_to_reference(runs, "kw", reference, killed)


@pytest.mark.slow(reason="a real study killed and run again, against an uninterrupted one")
def test_a_killed_study_continues_when_run_again(reference, tmp_path) -> None:
    runs = tmp_path / "runs"
    log = (tmp_path / "tune.log").open("w")
    process = subprocess.Popen(tune_command(runs, "ks"), env=environment(), stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        killed = wait_for_a_checkpointed_running_trial(study_folder(runs, "ks"), process)
        os.killpg(process.pid, signal.SIGKILL)  # the command and its workers
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    finished_before = {n for n, o in outcome(runs, "ks").items() if o["state"] in ("COMPLETE", "PRUNED")}
    assert any(t.state.name == "RUNNING" for t in trials_of(runs, "ks"))  # what a kill leaves behind
    done = run_tune(runs, "ks")
    assert "(0 new)" in done.stdout
    check_equal_to_reference(runs, "ks", reference, killed)
    assert all(attempts(runs, "ks")[n] == 1 for n in finished_before)  # finished trials are not run again
