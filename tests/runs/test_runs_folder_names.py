"""Run folders sort by start time, even when several start within one second."""

from __future__ import annotations

import datetime

from torchwork.runs.folder import latest_run, list_runs, new_run_folder


def test_runs_started_in_one_second_sort_in_the_order_they_started(tmp_path):
    made = []
    while len(made) < 40:  # forty folders: several of them share a second, whatever the load
        made.append(new_run_folder(tmp_path))
        assert latest_run(tmp_path) == made[-1]
    assert list_runs(tmp_path) == made
    seconds = [path.name.partition("-")[0] for path in made]
    assert len(set(seconds)) < len(seconds)  # the case the ids exist for did happen


def test_a_second_whose_ids_are_used_up_waits_for_the_next(tmp_path):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (tmp_path / f"{stamp}-ffffff" / "checkpoints").mkdir(parents=True)
    run = new_run_folder(tmp_path)
    assert run.name.partition("-")[0] > stamp and latest_run(tmp_path) == run
