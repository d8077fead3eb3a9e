"""A real study end to end: trials as run folders, summary, progress, best.yaml, show, the report; pruning;
the same params with two workers, each with its share of the cores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from tune_helpers import (
    TRIALS,
    environment,
    manifest,
    outcome,
    run_tune,
    study_folder,
    trial_json,
    trials_of,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One worker, the default pruner: the study the others are compared with."""
    runs = tmp_path_factory.mktemp("reference") / "runs"
    done = run_tune(runs, "ref")
    return runs, done


def test_summary_names_the_study_and_its_best(reference) -> None:
    runs, _ = reference
    summary = json.loads((study_folder(runs, "ref") / "summary.json").read_text())
    for key in ("study", "storage", "objective", "direction", "best_value", "best_params", "best_trial", "trials",
                "workers", "threads_per_worker", "seconds"):
        assert key in summary, key
    assert summary["objective"] == "val_macro_f1" and summary["direction"] == "maximize"
    assert summary["storage"].startswith("sqlite:///") and summary["workers"] == 1
    assert summary["threads_per_worker"] == len(os.sched_getaffinity(0))
    counts = summary["trials"]
    assert counts["complete"] + counts["pruned"] == TRIALS and counts["failed"] == counts["unfinished"] == 0
    found = outcome(runs, "ref")
    complete = {n: o["value"] for n, o in found.items() if o["state"] == "COMPLETE"}
    assert summary["best_value"] == max(complete.values())
    assert complete[summary["best_trial"]] == summary["best_value"]
    assert summary["best_params"] == found[summary["best_trial"]]["params"]


def test_each_trial_is_a_run_folder_naming_study_trial_and_params(reference) -> None:
    runs, _ = reference
    found = outcome(runs, "ref")
    for number, result in found.items():
        recorded = manifest(runs, "ref", number)["config"]
        assert recorded["tune"]["study"] == "ref" and recorded["tune"]["trial"] == number
        assert recorded["tune"]["params"] == result["params"]
        assert recorded["lr"] == result["params"]["lr"] and recorded["epochs"] == result["params"]["epochs"]
        assert recorded["tune"]["threads"] == len(os.sched_getaffinity(0))
        info = trial_json(runs, "ref", number)
        assert info["state"] == result["state"] and info["params"] == result["params"]


def test_every_epoch_is_reported_once_and_no_trial_is_left_running(reference) -> None:
    runs, _ = reference
    assert {t.state.name for t in trials_of(runs, "ref")} <= {"COMPLETE", "PRUNED"}
    for number, result in outcome(runs, "ref").items():
        epochs = trial_json(runs, "ref", number)["epochs"]
        assert list(result["intermediate"]) == list(range(epochs))
        if result["state"] == "COMPLETE":
            assert result["value"] == max(result["intermediate"].values())  # the best checkpoint's score


def test_a_progress_line_per_finished_trial(reference) -> None:
    _, done = reference
    lines = [line for line in done.stdout.splitlines() if line.startswith("trial ")]
    assert len(lines) == TRIALS, done.stdout
    assert all(" done, ETA " in line and " best " in line for line in lines[1:]), lines


def test_pruned_trials_are_kept_and_marked(reference) -> None:
    runs, _ = reference
    found = outcome(runs, "ref")
    pruned = [n for n, o in found.items() if o["state"] == "PRUNED"]
    assert pruned, found  # lr 1e-3 .. 0.3: the low rates fall behind at once
    for number in pruned:
        info = trial_json(runs, "ref", number)
        assert info["state"] == "PRUNED" and info["epochs"] < info["params"]["epochs"]
        assert (study_folder(runs, "ref") / info["run"] / "checkpoints").is_dir()


def test_show_prints_the_trials_table(reference) -> None:
    runs, _ = reference
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "tune", "show", str(study_folder(runs, "ref"))],
                          env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == TRIALS and "best: trial" in done.stdout
    assert {line.split()[1] for line in rows} <= {"COMPLETE", "PRUNED"}


def test_best_yaml_reruns_to_the_same_validation_score(reference) -> None:
    runs, _ = reference
    folder = study_folder(runs, "ref")
    summary = json.loads((folder / "summary.json").read_text())
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "train", str(folder / "best.yaml"),
                           "--set", "export_formats=onnx", "--set", "quantize=false"],
                          env=environment(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = max(p for p in (folder / "best").iterdir() if p.is_dir())
    assert json.loads((run / "checkpoints" / "best.json").read_text())["value"] == summary["best_value"]


@pytest.mark.slow(reason="retrains the defaults and the best trial on all data, as the study does: about 60 s")
def test_the_final_runs_score_the_defaults_and_the_best_on_test(reference) -> None:
    import time

    from tune_helpers import SETTINGS, SPACE

    from torchwork.tune.results import finish
    from torchwork.tune.runner import TuneOptions, prepare

    runs, _ = reference
    space = runs.parent / "final-space.yaml"
    space.write_text(SPACE)
    options = TuneOptions("sentiment", str(space), trials=TRIALS, study="ref", seed=0,
                          settings=[f"run_dir={runs}", *SETTINGS])
    prepared = prepare(options)
    assert prepared["queued"] == 0  # a finished study: nothing to run again
    summary = finish(prepared, options, len(os.sched_getaffinity(0)), time.perf_counter())
    defaults = summary["defaults"]
    assert 0 < defaults["value"] <= 1 and defaults["epochs"] >= 1
    assert summary["gain_over_defaults"] == round(summary["best_value"] - defaults["value"], 6)
    rerun = summary["best_rerun"]
    assert rerun["validation_equal"] is True and rerun["validation"] == summary["best_value"]
    assert 0 < rerun["test"]["macro_f1"] <= 1
    html = (study_folder(runs, "ref") / "report.html").read_text()
    assert "Gain of the best settings over the defaults" in html


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make installs it as root)")
def test_the_report_renders_in_chromium_without_console_errors(reference, tmp_path) -> None:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "inspect"))
    from chromium_page import render_in_chromium

    runs, _ = reference
    page = study_folder(runs, "ref") / "report.html"
    html = page.read_text()
    assert "http://" not in html and "https://" not in html  # self-contained
    for section in ("Optimization history", "Each setting against the score", "Parameter importances", "Trials",
                    "never read by the tuner"):
        assert section in html, section
    screenshot, errors = render_in_chromium(page, tmp_path)
    assert screenshot.stat().st_size > 20_000 and errors == []


@pytest.mark.slow(reason="two worker processes of a real study, against a reference study")
def test_two_workers_try_the_same_params_with_their_share_of_threads(reference, tmp_path) -> None:
    runs, _ = reference
    other = tmp_path / "runs"
    run_tune(other, "two", "--workers", "2")
    ours, theirs = outcome(runs, "ref"), outcome(other, "two")
    assert {n: o["params"] for n, o in theirs.items()} == {n: o["params"] for n, o in ours.items()}
    expected = max(1, len(os.sched_getaffinity(0)) // 2)
    for number in theirs:
        assert manifest(other, "two", number)["config"]["tune"]["threads"] == expected
        assert trial_json(other, "two", number)["threads"] == expected
    summary = json.loads((study_folder(other, "two") / "summary.json").read_text())
    assert summary["workers"] == 2 and summary["threads_per_worker"] == expected
    assert (study_folder(other, "two") / "workers" / "0.log").is_file()  # the engine's output, not the terminal


@pytest.mark.slow(reason="eight worker processes, each importing torch and training, on two cores")
def test_eight_workers_share_the_embedded_storage(tmp_path) -> None:
    runs = tmp_path / "runs"
    done = run_tune(runs, "eight", "--workers", "8", trials=8)
    folder = study_folder(runs, "eight")
    logs = done.stdout + done.stderr + "".join(p.read_text() for p in (folder / "workers").glob("*.log"))
    assert "database is locked" not in logs and "Traceback" not in logs, logs[-3000:]
    assert len(list((folder / "workers").glob("*.log"))) == 8
    assert {t.state.name for t in trials_of(runs, "eight")} <= {"COMPLETE", "PRUNED"}
    assert sorted(outcome(runs, "eight")) == list(range(8))
    assert json.loads((folder / "summary.json").read_text())["threads_per_worker"] == 1


def test_timeout_starts_no_trial_after_it(tmp_path) -> None:
    runs = tmp_path / "runs"
    done = run_tune(runs, "late", "--timeout", "0.5")  # gone before a worker has even imported torch
    summary = json.loads((study_folder(runs, "late") / "summary.json").read_text())
    assert summary["trials"]["unfinished"] == TRIALS and summary["best_value"] is None, done.stdout
    assert {t.state.name for t in trials_of(runs, "late")} == {"WAITING"}  # queued for the next run


def test_resume_of_a_trial_run_runs_its_study_again(reference) -> None:
    """`torchwork resume` of a trial's run folder runs the study's own command, which continues the study (a
    killed trial from its newest checkpoint: test_tune_kill); here every trial has finished, so none runs again."""
    runs, _ = reference
    before = outcome(runs, "ref")
    (run,) = [p for p in (study_folder(runs, "ref") / "trials" / "0").iterdir() if p.is_dir()]
    assert manifest(runs, "ref", 0)["command"]["argv"][1:3] == ["tune", "sentiment"]
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "resume", str(run), "--yes"], env=environment(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "this run is trial 0 of the study ref: its command runs the study again" in done.stderr
    assert "(0 new)" in done.stdout and "Traceback" not in done.stderr
    assert outcome(runs, "ref") == before
