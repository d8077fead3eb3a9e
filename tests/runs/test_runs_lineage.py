"""Which run each fit of a resumed script continues (torchwork.runs.lineage), on run folders written here:
TORCHWORK_RESUME may name any training's run of the script, and a fit without a run_dir takes none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchwork.errors import CheckpointError
from torchwork.runs import lineage


def run_folder(path: Path, recorded: dict | None) -> Path:
    (path / "checkpoints").mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"lineage": recorded} if recorded else {}))
    return path


@pytest.fixture
def resuming(monkeypatch):
    """Set TORCHWORK_RESUME as `torchwork resume` would, forgetting the runs this process opened before."""
    lineage.forget()

    def named(run: Path) -> None:
        monkeypatch.setenv(lineage.ENV, str(run))

    yield named
    lineage.forget()


def test_a_later_training_s_run_named_leads_every_fit_to_its_own_run_apart_or_nested(tmp_path, resuming):
    first = run_folder(tmp_path / "pretrain" / "20260101T000000Z-aaaaaa", {"outermost": "20260101T000000Z-aaaaaa",
                                                                           "index": 0})
    lineage.forget()
    lineage.register(first)
    later = tmp_path / "finetune" / "20260101T000100Z-bbbbbb"
    recorded = lineage.register(later)
    assert recorded == {"outermost": first.name, "index": 1, "path": "../../pretrain/20260101T000000Z-aaaaaa"}
    run_folder(later, recorded)
    resuming(later)  # the run the kill interrupted: the second training's
    assert lineage.resume_target(None, tmp_path / "pretrain") == first  # the first fit: the first run
    assert lineage.resume_target(None, None) is None  # a fit without a run_dir takes no run: it trains anew
    lineage.register(first)
    assert lineage.resume_target(None, tmp_path / "finetune") == later  # the second fit: its own
    lineage.register(later)
    assert lineage.resume_target(None, tmp_path / "third") is None  # a third had not started: a new run


def test_a_nested_run_recorded_without_a_path_finds_the_first_run_among_its_parents(tmp_path, resuming):
    first = run_folder(tmp_path / "20260101T000000Z-aaaaaa", {"outermost": "20260101T000000Z-aaaaaa", "index": 0})
    later = run_folder(first / "finetune" / "20260101T000100Z-bbbbbb", {"outermost": first.name, "index": 1})
    resuming(later)
    assert lineage.outermost_of(later) == first
    assert lineage.resume_target("latest", tmp_path) == first


def test_a_later_run_whose_first_run_is_gone_is_refused_with_what_to_do(tmp_path, resuming):
    later = run_folder(tmp_path / "finetune" / "20260101T000100Z-bbbbbb",
                       {"outermost": "20260101T000000Z-aaaaaa", "index": 1, "path": "../../gone/20260101T000000Z-aaaaaa"})
    resuming(later)
    with pytest.raises(CheckpointError, match=r"training 2 of its script, whose first training's run "
                                              r"'20260101T000000Z-aaaaaa' is not where it was .*Put it back"):
        lineage.resume_target(None, tmp_path / "pretrain")

