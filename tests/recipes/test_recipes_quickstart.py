"""A shortened quickstart runs end to end and produces every file; the report renders in Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def quickstart_command(runs: Path) -> list[str]:
    return [sys.executable, "-m", "torchwork.cli", "quickstart", "--quick", "--model", "ngram", "--set", f"run_dir={runs}",
            "--set", "subset=600", "--set", "epochs=1", "--set", "threads=1",
            "--set", "verify_rounds=5"]


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    runs = tmp_path_factory.mktemp("quickstart") / "runs"
    done = subprocess.run(quickstart_command(runs), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = list(runs.iterdir())
    return done, run


@pytest.mark.slow(reason="reads the module's whole quickstart run (its fixture: training, exports, report)")
def test_quickstart_produces_every_file(quickstart):
    done, run = quickstart
    for name in ("manifest.json", "metrics.jsonl", "report.html", "summary.json", "checkpoints/best.pt",
                 "preprocess/preprocess.json", "artifact/manifest.json"):
        assert (run / name).is_file(), name
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary) >= {"test", "baseline", "artifact", "report"}
    assert set(summary["test"]) == {"accuracy", "macro_f1"} and set(summary["baseline"]) == {"accuracy", "macro_f1"}
    assert 0.0 < summary["test"]["macro_f1"] <= 1.0 and 0.3 < summary["baseline"]["macro_f1"] <= 1.0
    assert Path(summary["artifact"]) == run / "artifact" and Path(summary["report"]) == run / "report.html"
    artifact_manifest = json.loads((run / "artifact" / "manifest.json").read_text())
    assert {"pt2", "onnx"} <= set(artifact_manifest["variants"])
    assert any("int8" in name for name in artifact_manifest["variants"])
    last_lines = done.stdout.strip().splitlines()[-3:]
    assert last_lines[0].startswith("report:") and last_lines[-1] == f"serve it: torchwork serve {run / 'artifact'}"
    assert "precision:" in done.stdout and "cleaning:" in done.stdout


def test_the_quickstart_prints_and_keeps_the_tweets_data_report(quickstart):
    done, run = quickstart
    report = json.loads((run / "data_report.json").read_text())
    assert report["source"]["bundled"] == "tweets" and report["source"]["rows"] == 38158
    counts = {f["kind"]: f["count"] for f in report["findings"]}
    # The shipped file, counted by the audit itself (tests/data/test_data_audit.py plants each kind).
    assert counts["duplicate"] == 955 and counts["conflicting-labels"] == 623 and counts["garbled-text"] == 4874
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    assert set(report["splits"]) == {"train", "validation", "test"}
    assert "data report: 0 error(s)" in done.stdout and "warning duplicate" in done.stdout
    assert "row None" not in done.stdout  # a class-count finding has no row to show
    manifest = json.loads((run / "manifest.json").read_text())["config"]
    assert manifest["data_report_counts"] == counts and manifest["data_source"]["bundled"] == "tweets"
    assert "Data report (before training)" in (run / "report.html").read_text()


def test_files_a_user_keeps_have_the_mode_of_a_plain_open(quickstart):
    _, run = quickstart
    umask = os.umask(0o022)
    os.umask(umask)
    for name in ("report.html", "summary.json", "manifest.json", "checkpoints/best.pt"):
        assert (run / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


@pytest.mark.slow(reason="a second quickstart process resuming a copy of the run")
def test_resume_reads_the_recorded_baseline_and_precision_instead_of_measuring_again(quickstart, tmp_path):
    done, run = quickstart
    recorded = json.loads((run / "manifest.json").read_text())["config"]
    summary = json.loads((run / "summary.json").read_text())
    assert recorded["baseline"]["macro_f1"] == summary["baseline"]["macro_f1"]
    assert recorded["precision_chosen"] == summary["precision"]
    # A copy of the run whose records are marked: only reading them (not measuring again) gives these values.
    resumed_run = tmp_path / run.name
    shutil.copytree(run, resumed_run)
    manifest = json.loads((resumed_run / "manifest.json").read_text())
    manifest["config"]["baseline"]["macro_f1"] = 0.123456
    manifest["config"]["precision_chosen"] = other = "bf16" if recorded["precision_chosen"] == "32" else "32"
    manifest["training"]["precision"] = other  # what the trainer records of the same decision
    (resumed_run / "manifest.json").write_text(json.dumps(manifest))
    again = subprocess.run(quickstart_command(run.parent), capture_output=True, text=True, timeout=900,
                           env={**os.environ, "TORCHWORK_RESUME": str(resumed_run)})
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "macro-F1 0.1235 (recorded by the run being resumed)" in again.stdout
    assert f"precision: {other} (recorded by the run being resumed)" in again.stdout
    assert "measured step time" not in again.stdout
    resumed = json.loads((resumed_run / "summary.json").read_text())
    assert resumed["baseline"]["macro_f1"] == 0.123456 and resumed["precision"] == other
    assert resumed["epochs_run"] == summary["epochs_run"]  # nothing trained again: it was finished


def test_report_is_self_contained(quickstart):
    _, run = quickstart
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4  # curves, F1 bars, confusion matrix
    for forbidden in ("http://", "https://", "<script src", "<link "):
        assert forbidden not in html.split("<pre>")[0], forbidden  # nothing fetched when opened offline
    assert "TF-IDF" in html and "Artifact variants" in html and "Guard findings" in html
    assert "chosen: " in html  # the variants table says why one was chosen


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make installs it as root)")
def test_report_renders_in_headless_chromium(quickstart, tmp_path):
    _, run = quickstart
    screenshot = tmp_path / "report.png"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--window-size=1100,2400", f"--screenshot={screenshot}", (run / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120)
    assert screenshot.is_file() and screenshot.stat().st_size > 20_000, done.stderr[-2000:]
    console_errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert not console_errors, console_errors
