"""optuna-dashboard, a real server process on 127.0.0.1, reads a study's SQLite storage while the study runs;
the study is not disturbed (optuna-dashboard#545: a dashboard on a plain SQLite file crashed the study)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from objective_helpers import finish, start
from tune_helpers import outcome, study_folder, trials_of

DASHBOARD = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as reply:
        assert reply.status == 200
        return json.loads(reply.read())


def _trials_so_far(runs: Path, database: Path) -> list:
    """The study's trials, or none while its storage is still being made: the file exists before its tables
    and the study's row do, and reading it then fails (KeyError: study not found; or SQLite's "unable to open
    database file" while the workers create it). This reader only decides when to start the dashboard; what
    the test judges is the study's own log and outcome."""
    try:
        return trials_of(runs, "watched") if database.exists() else []
    except (KeyError, optuna.exceptions.StorageInternalError, sqlalchemy.exc.OperationalError):
        return []


@pytest.mark.skipif(DASHBOARD is None, reason="optuna-dashboard is not installed (the dashboard extra)")
def test_the_dashboard_reads_a_running_study_without_disturbing_it(tmp_path) -> None:
    study = start(tmp_path, "watched", trials=6, workers=2, pruner="none", epoch_s=0.5)
    database = study_folder(tmp_path / "runs", "watched") / "study.db"
    port = free_port()
    dashboard = None
    try:
        deadline = time.monotonic() + 120
        while not any(t.state.name == "RUNNING" for t in _trials_so_far(tmp_path / "runs", database)):
            assert time.monotonic() < deadline and study.poll() is None, (tmp_path / "watched.log").read_text()
            time.sleep(0.2)
        dashboard = subprocess.Popen([DASHBOARD, f"sqlite:///{database}", "--host", "127.0.0.1", "--port", str(port),
                                      "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        seen_running = reads = 0
        while study.poll() is None:  # the dashboard reads the study as the browser page does, until it ends
            try:
                studies = get(f"http://127.0.0.1:{port}/api/studies")["study_summaries"]
            except OSError:
                assert dashboard.poll() is None, dashboard.stderr.read().decode()[-2000:]
                time.sleep(0.2)
                continue
            (found,) = [s for s in studies if s["study_name"] == "watched"]
            detail = get(f"http://127.0.0.1:{port}/api/studies/{found['study_id']}")
            seen_running += any(t["state"] == "Running" for t in detail["trials"])
            reads += 1
            time.sleep(0.2)
        finish(tmp_path, study, "watched")
        assert reads >= 3 and seen_running >= 1, (reads, seen_running)
        assert dashboard.poll() is None  # still serving
        final = get(f"http://127.0.0.1:{port}/api/studies/{found['study_id']}")
    finally:
        for process in (study, dashboard):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    log = (tmp_path / "watched.log").read_text()
    assert "locked" not in log and "Traceback" not in log, log[-3000:]
    found_states = {n: o["state"] for n, o in outcome(tmp_path / "runs", "watched").items()}
    assert found_states == {n: "COMPLETE" for n in range(6)}
    assert [t["state"] for t in final["trials"]] == ["Complete"] * 6  # what the dashboard shows at the end
