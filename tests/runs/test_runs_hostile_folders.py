"""``runs ls/show/diff`` beside hostile run folders: JSON nested 100,000 deep, a 5,000-digit seed, a pid of
10**30, steps of Infinity and NaN, links to /dev/zero and out of the folder, FIFOs, escape sequences in a
folder's name and manifest. Each bad folder is listed as unreadable (with the reason) or with that field
unknown; the good runs beside it are still listed; nothing hangs, crashes or reaches the terminal raw; a
4 MB code patch is compared in linear time."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import torchwork
from torchwork.cli import main
from torchwork.runs.compare import compare_runs

ENV = {**os.environ, "PYTHONPATH": str(Path(torchwork.__file__).parents[1])}
GOOD = ("20260101T000000Z-000001", "20260101T000100Z-000002")
ESCAPED = "evil\x1b]0;owned\x07\x1b[2J"


@pytest.fixture(autouse=True)
def _passive_waiting(monkeypatch):
    """The command sets OMP_WAIT_POLICY when torch is not imported yet: set here, so that the test leaves the
    environment as it found it."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")


def run_folder(root: Path, name: str, manifest: dict | str, metrics: str = "") -> Path:
    folder = root / name
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    if metrics:
        (folder / "metrics.jsonl").write_text(metrics)
    return folder


def finished(seed: int, **extra) -> dict:
    return {"state": "finished", "seed": seed, "started": "2026-01-01T00:00:00+00:00",
            "ended": "2026-01-01T00:01:00+00:00", "config": {"lr": 0.1, "seed": seed},
            "monitor": {"metric": "val_loss", "mode": "min", "best": 0.5, "final": 0.6}, **extra}


def with_good_runs(root: Path) -> Path:
    for seed, name in enumerate(GOOD):
        run_folder(root, name, finished(seed), '{"step": 1, "val_loss": 0.7}\n{"step": 2, "val_loss": 0.6}\n')
    return root


def unended(**extra) -> dict:
    return {"state": "running", "started": "2026-01-01T00:00:00+00:00", "monitor": {"metric": "val_loss",
            "mode": "min"}, "process": {"pid": 1, "host": "elsewhere"}, **extra}


def test_ls_lists_parsing_hostile_folders_as_unreadable_and_the_good_ones_beside_them(tmp_path, capsys):
    root = with_good_runs(tmp_path / "runs")
    run_folder(root, "deep", '{"seed": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    run_folder(root, "digits", '{"state": "finished", "seed": 1' + "0" * 5000 + "}")
    run_folder(root, "pid", {**unended(), "process": {"pid": 10**30, "host": socket.gethostname()}})
    run_folder(root, "steps", {**unended(), "monitor": {"metric": "val_loss", "mode": "min", "best": float("inf")}},
               '{"step": Infinity, "val_loss": 0.3}\n{"step": NaN, "val_loss": 0.2}\n{"step": 1e400, "time": NaN}\n')
    run_folder(root, "seed", finished(10**30, ended="2026-01-01T00:02:00+00:00"))
    run_folder(root, ESCAPED, finished(3, config={"recipe": "red\x1b[31m", "seed": 3}, state="done\x1b[8m"))
    outside = run_folder(tmp_path, "outside", finished(4))
    link = run_folder(root, "link-out", "{}")
    (link / "manifest.json").unlink()
    (link / "manifest.json").symlink_to(outside / "manifest.json")
    assert main(["runs", "ls", str(root)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in GOOD) and "\x1b" not in out and "\x07" not in out
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    for name in ("deep", "digits", "link-out"):
        assert "unreadable" in lines[name], out
    assert "nests more than 64 levels" in out and "5000 digits" in out.replace("5001", "5000")
    assert "leading out of its run folder" in out
    assert "  unknown  " in lines["pid"] and re.search(r"val_loss +- +-", lines["steps"])
    assert re.search(r"0\.6000 +- +-", lines["seed"])  # seed 10**30: that field unknown, the row listed
    assert "evil\\x1b]0;owned\\x07\\x1b[2J" in out and "red\\x1b[31m" in out
    assert main(["runs", "ls", "--json", str(root)]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 9


def test_show_and_diff_read_hostile_values_without_a_traceback(tmp_path, capsys):
    root = with_good_runs(tmp_path / "runs")
    a, b = root / GOOD[0], root / GOOD[1]
    (b / "metrics.jsonl").write_text('{"step": 1, "val_loss": 0.7}\n{"step": Infinity, "val_loss": 0.1}\n'
                                     '{"step": NaN, "val_loss": 0.1}\n{"step": 2, "val_loss": NaN}\n'
                                     '{"step": 1' + "0" * 400 + ', "val_loss": 0.1}\n')  # an int past float's range
    manifest = finished(1, process={"pid": 10**30, "host": socket.gethostname()}, state="running",
                        error="Boom\x1b]0;owned\x07")
    del manifest["ended"]
    (b / "manifest.json").write_text(json.dumps(manifest))
    assert main(["runs", "diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "curves: val_loss" in out and "\x1b" not in out
    assert main(["runs", "show", str(b)]) == 0
    out = capsys.readouterr().out
    assert "state     unknown  (Boom\\x1b]0;owned\\x07)" in out and "\x1b" not in out
    deep = run_folder(root, "deep\x1b[2J", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["runs", "show", str(deep)]) == 2
    err = capsys.readouterr().err
    assert "nests more than 64 levels" in err and "\x1b" not in err and "deep\\x1b[2J" in err


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))  # reading /dev/zero fails here, not the machine


def test_ls_refuses_fifos_and_links_to_devices_without_hanging(tmp_path):
    root = with_good_runs(tmp_path / "runs")
    fifo = run_folder(root, "fifo", "{}")
    (fifo / "manifest.json").unlink()
    os.mkfifo(fifo / "manifest.json")
    zero = run_folder(root, "zero", "{}")
    (zero / "manifest.json").unlink()
    (zero / "manifest.json").symlink_to("/dev/zero")
    for name, target in (("best-zero", "checkpoints/best.json"), ("metrics-zero", "metrics.jsonl")):
        link = run_folder(root, name, unended(), "" if target == "metrics.jsonl" else "\n")
        (link / target).unlink(missing_ok=True)
        (link / target).symlink_to("/dev/zero")
    os.mkfifo(run_folder(root, "metrics-fifo", unended(), "\n") / "metrics.jsonl.fifo")
    os.replace(root / "metrics-fifo" / "metrics.jsonl.fifo", root / "metrics-fifo" / "metrics.jsonl")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "runs", "ls", str(root)], capture_output=True,
                          text=True, env=ENV, timeout=20, preexec_fn=_limit_memory)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - started < 20 and all(name in done.stdout for name in GOOD)
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:] if line.strip()}
    assert "unreadable" in lines["fifo"] and "unreadable" in lines["zero"]
    out_to_zero = "leading out of its run folder (to /dev/zero)"
    for name, kind in (("fifo", "is a FIFO"), ("zero", out_to_zero), ("best-zero", out_to_zero),
                       ("metrics-zero", out_to_zero), ("metrics-fifo", "is a FIFO")):
        assert any(line.startswith(f"{name}: ") and kind in line for line in done.stdout.splitlines()), name


@pytest.mark.parametrize("megabytes", [4])
def test_diff_compares_a_4_mb_code_patch_in_linear_time(tmp_path, megabytes):
    root = with_good_runs(tmp_path / "runs")
    lines = [f"+x_{i} = {i}  # padding to make the patch long\n" for i in range(megabytes * 2**20 // 40)]
    for index, name in enumerate(GOOD):
        patch = "".join(["diff --git a/big.py b/big.py\n", "--- a/big.py\n", "+++ b/big.py\n", *lines,
                         f"+last = {index}\n", "diff --git a/small.py b/small.py\n", "+y = 1\n"])
        (root / name / "code.patch").write_text(patch)
        manifest = json.loads((root / name / "manifest.json").read_text())
        manifest["git"] = {"commit": "a" * 40, "dirty": True, "patch": "code.patch", "patch_sha256": str(index),
                           "patch_files": ["big.py", "small.py"]}
        (root / name / "manifest.json").write_text(json.dumps(manifest))
    started = time.perf_counter()
    comparison = compare_runs(root / GOOD[0], root / GOOD[1])
    assert time.perf_counter() - started < 5  # 41 s when each line was added to a string
    patch = next(d for d in comparison["differences"] if d["key"] == "patch")
    assert patch["files"] == [{"file": "big.py", "patched": "differently in A and B"}]
