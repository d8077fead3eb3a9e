"""`torchwork runs ls` and `runs show`, and bad input: folders that are not runs, half-written and
hand-edited manifests, runs of different recipes: one clear line, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runs_helpers import tiny_fit

import torchwork
from torchwork.errors import ConfigError
from torchwork.runs.compare import compare_runs
from torchwork.runs.listing import filter_rows, format_rows, list_runs, sort_rows
from torchwork.runs.show import describe_run

ENV = {**os.environ, "PYTHONPATH": str(Path(torchwork.__file__).parents[1])}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchwork.cli", "runs", *args], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("listing") / "runs"
    for seed, lr in ((0, 0.05), (1, 0.05), (2, 0.2)):
        tiny_fit(root, seed=seed, lr=lr, epochs=2)
    nested = tiny_fit(root, seed=3, epochs=1)  # then a run inside it, as the quickstart's transformer run
    tiny_fit(nested.run_path / "transformer", seed=4, epochs=1)
    for trial in (1, 0):
        tiny_fit(root / "tune" / "sweep" / "trials" / str(trial), seed=trial, epochs=1)
    return root


def test_ls_lists_every_run_nested_ones_and_trials_under_their_study(runs):
    rows = list_runs(runs)
    assert len(rows) == 7 and {r.state for r in rows} == {"finished"}
    nested = [r for r in rows if "/transformer/" in r.name]
    assert len(nested) == 1 and rows.index(nested[0]) == rows.index(
        next(r for r in rows if nested[0].name.startswith(r.name + "/"))) + 1  # right after its parent
    trials = [r for r in rows if r.study]
    assert {(r.study, r.trial) for r in trials} == {("sweep", "0"), ("sweep", "1")}
    table = format_rows(rows)
    assert "study sweep: 2 trials (2 finished)" in table
    lines = table.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("study sweep"))
    assert lines[at + 1].lstrip().startswith("tune/sweep/trials/0/") and lines[at + 2].lstrip().startswith(
        "tune/sweep/trials/1/")
    first = next(r for r in rows if r.seed == 0 and not r.study)
    manifest = json.loads((first.path / "manifest.json").read_text())
    assert (first.metric, first.best, first.final) == ("val_loss", manifest["monitor"]["best"],
                                                       manifest["monitor"]["final"])
    assert first.duration_s is not None and first.duration_s >= 0


def test_ls_sorts_and_filters_by_columns_and_settings(runs):
    rows = list_runs(runs)
    by_best = sort_rows(rows, "best")
    assert [r.best for r in by_best] == sorted(r.best for r in rows)  # val_loss: lowest first
    assert [r.seed for r in sort_rows(rows, "-seed")][:2] == [4, 3]
    assert {r.seed for r in filter_rows(rows, ["lr=0.2"])} == {2}
    assert {r.seed for r in filter_rows(rows, ["config.lr=0.05", "seed=1"])} == {1}
    assert filter_rows(rows, ["state=killed"]) == []
    with pytest.raises(ConfigError, match="must be KEY=VALUE"):
        filter_rows(rows, ["lr"])
    with pytest.raises(ConfigError, match="no run monitors 'val_acc'"):
        sort_rows(rows, "val_acc")
    listed = json.loads(cli("ls", str(runs), "--json", "--filter", "seed=2").stdout)
    assert [r["seed"] for r in listed] == [2] and listed[0]["state"] == "finished"


def test_ls_takes_the_documented_reversed_sort_and_says_when_a_filter_matches_nothing(runs, capsys):
    """`--sort -seed` was argparse's "expected one argument"; a filter matching nothing said "no run folders
    here" with five runs there."""
    from torchwork.cli import main

    assert main(["runs", "ls", str(runs), "--sort", "-seed", "--json"]) == 0
    assert [r["seed"] for r in json.loads(capsys.readouterr().out)][:2] == [4, 3]
    assert main(["runs", "ls", str(runs), "--filter", "lr=99"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == f"none of the {len(list_runs(runs))} run folder(s) under {runs} matches --filter lr=99"


def test_a_killed_run_is_told_from_a_running_one_and_a_resumed_one_counts_its_resumes(tmp_path):
    script = tmp_path / "long.py"
    script.write_text(
        "import sys, time\nsys.path.insert(0, sys.argv[2])\nfrom runs_helpers import tiny_fit\n"
        "class Slow:\n    def on_epoch_end(self, trainer, logs):\n        time.sleep(30)\n"
        "tiny_fit(__import__('pathlib').Path(sys.argv[1]), epochs=3, callbacks=[Slow()])\n")
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs"), str(Path(__file__).parent)],
                               env=ENV)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any(p.stat().st_size for p in (tmp_path / "runs").glob("*/metrics.jsonl")):
            time.sleep(0.2)
        (row,) = list_runs(tmp_path / "runs")
        assert row.state == "running"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        (row,) = list_runs(tmp_path / "runs")
        assert row.state == "killed" and row.final is not None  # read from the metrics file's tail
    finally:
        if process.poll() is None:
            process.kill()
    manifest = json.loads((row.path / "manifest.json").read_text())
    manifest.update(state="finished", resumes=[{"at": manifest["started"], "from": "x.pt", "step": 4}] * 2)
    (row.path / "manifest.json").write_text(json.dumps(manifest))
    (row,) = list_runs(tmp_path / "runs")
    assert row.state_text == "finished, resumed 2x"


def test_show_prints_what_defined_the_run(runs):
    run = next(r for r in list_runs(runs) if r.seed == 2).path
    described = describe_run(run)
    assert described["config"]["lr"] == 0.2 and described["data"]["train"]["rows"] == 64
    done = cli("show", str(run))
    assert done.returncode == 0 and "seed      2" in done.stdout and "train: 64 rows" in done.stdout


def test_bad_input_is_one_clear_line_never_a_traceback(runs, tmp_path):
    good = next(r for r in list_runs(runs) if r.seed == 0).path
    half = tmp_path / "half"
    (half / "checkpoints").mkdir(parents=True)
    text = (good / "manifest.json").read_text()
    (half / "manifest.json").write_text(text[: len(text) // 2])
    edited = tmp_path / "edited"
    (edited / "checkpoints").mkdir(parents=True)
    (edited / "manifest.json").write_text(text.replace('"state": "finished"', '"state": finished'))
    listy = tmp_path / "listy"
    (listy / "checkpoints").mkdir(parents=True)
    (listy / "manifest.json").write_text("[1, 2]")
    typed = tmp_path / "typed"  # valid JSON, every field of the wrong type
    (typed / "checkpoints").mkdir(parents=True)
    (typed / "manifest.json").write_text(json.dumps({k: [] for k in json.loads(text)} | {"config": "lr=1"}))
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / "manifest.json").write_text(json.dumps(json.loads(text) | {"config": {"recipe": "fashion"}}))
    cases = [(("show", str(tmp_path / "missing")), "does not exist"),
             (("show", str(tmp_path)), "is not a run folder: it has no manifest.json"),
             (("diff", str(good), str(half)), "is not valid JSON, half-written (it ends early)"),
             (("diff", str(edited), str(good)), "is not valid JSON, edited by hand or damaged"),
             (("show", str(listy)), "holds a JSON list, not a run manifest"),
             (("diff", str(good), str(other)), "runs of different recipes share no settings"),
             (("diff", str(good), str(good)), "are the same run folder"),
             (("ls", str(tmp_path / "missing")), "is not a directory"),
             (("ls", str(runs), "--filter", "seed"), "must be KEY=VALUE")]
    for args, message in cases:
        done = cli(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and message in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for args in (("show", str(typed)), ("diff", str(good), str(typed)), ("ls", str(tmp_path))):
        done = cli(*args)
        assert "Traceback" not in done.stderr, (args, done.stderr)
    listed = cli("ls", str(tmp_path))
    assert listed.returncode == 0 and "half: " in listed.stdout and "unreadable" in listed.stdout


def _copy_with(run: Path, target: Path, edit) -> Path:
    import shutil

    shutil.copytree(run, target)
    manifest = json.loads((target / "manifest.json").read_text())
    edit(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def test_identical_runs_differ_in_nothing_and_the_verdict_says_training_was_untouched(tmp_path):
    a = tiny_fit(tmp_path / "runs", epochs=2).run_path
    b = tiny_fit(tmp_path / "runs", epochs=2).run_path  # same seed, settings, data and code
    comparison = compare_runs(a, b)
    assert comparison["differences"] == [] and comparison["curves"]["divergence"] is None
    assert "did not change and the curves are identical" in comparison["verdict"]["conclusion"]


def test_an_environment_difference_is_ranked_with_env_diff_and_the_page_escapes_values(tmp_path):
    a = tiny_fit(tmp_path / "runs", epochs=1).run_path

    def older_torch(manifest):
        manifest["environment"]["torch"] = "1.13.1+cpu"
        manifest["config"]["note"] = "<script>alert(1)</script>"

    b = _copy_with(a, tmp_path / "runs" / "b", older_torch)
    comparison = compare_runs(a, b)
    environment = [d for d in comparison["differences"] if d["group"] == "environment"]
    assert environment[0]["key"] == "torch major version" and environment[0]["env_rank"] == 1
    assert [c["key"] for c in comparison["verdict"]["causes"]] == ["note", "torch major version"]
    from torchwork.runs.diff_html import render

    page = render(comparison)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_a_killed_runs_best_is_never_worse_than_its_final(tmp_path) -> None:
    """Killed after an epoch's metrics line but before its best checkpoint: best 0.7069, final 0.6945 for a
    `min` metric, in `runs ls`."""
    run = tmp_path / "runs" / "20261207T233404Z-000384"
    (run / "checkpoints").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "state": "running", "process": {"pid": 2**22 + 12345, "host": socket.gethostname()},
        "started": "2026-12-07T23:34:04+00:00", "monitor": {"metric": "val_loss", "mode": "min"}}))
    (run / "checkpoints" / "best.json").write_text(json.dumps({"monitor": "val_loss", "value": 0.7069, "step": 8}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in (
        {"step": 8, "val_loss": 0.7069, "time": 1.0}, {"step": 16, "val_loss": 0.6945, "time": 2.0})))
    (row,) = list_runs(tmp_path / "runs")
    assert row.state == "killed" and (row.best, row.final) == (0.6945, 0.6945)


def test_a_run_folder_that_lost_its_manifest_is_listed_as_unreadable(runs, tmp_path) -> None:
    """It was left out of `runs ls` without a word, its checkpoints and metrics still there."""
    import shutil

    first = next(p for p in sorted(runs.iterdir()) if (p / "manifest.json").is_file())
    copy = tmp_path / "runs" / first.name
    shutil.copytree(first, copy)
    (copy / "manifest.json").unlink()
    (row,) = list_runs(tmp_path / "runs")
    assert row.state == "unreadable" and "no manifest.json beside its checkpoints/ and metrics.jsonl" in row.problem
