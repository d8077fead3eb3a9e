"""checkpoints/best.json read as data: bounded, a regular file of the run, each field checked."""

from __future__ import annotations

import json
import os

import pytest

from torchwork.errors import CheckpointError
from torchwork.runs.best_record import MAX_BEST_BYTES, read_best_record

GOOD = {"monitor": "val_loss", "mode": "min", "value": 0.25, "step": 40, "from": "step-000000040.pt"}


def _write(run, text: str) -> None:
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "checkpoints" / "best.json").write_text(text)


def test_a_record_the_trainer_wrote_is_read_whole(tmp_path) -> None:
    _write(tmp_path, json.dumps(GOOD))
    assert read_best_record(tmp_path) == GOOD


@pytest.mark.parametrize(("record", "message"), [
    ({**GOOD, "value": float("nan")}, "'value' is not a finite number"),
    ({**GOOD, "value": "0.25"}, "'value' is not a finite number"),
    ({**GOOD, "step": True}, "'step' is not a count \\(an integer >= 0\\)"),
    ({**GOOD, "step": -1}, "'step' is not a count \\(an integer >= 0\\)"),
    ([GOOD], "expected an object of fields, found list"),
])
def test_a_field_that_is_not_what_the_trainer_writes_is_named(tmp_path, record, message) -> None:
    _write(tmp_path, json.dumps(record))
    with pytest.raises(CheckpointError, match=f"best.json: {message}; it was not written by torchwork"):
        read_best_record(tmp_path)


def test_a_missing_record_says_the_run_has_no_best_checkpoint(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="best.json is missing: the run recorded no best checkpoint"):
        read_best_record(tmp_path)


def test_a_fifo_an_oversized_file_and_a_cut_short_one_are_refused_without_waiting(tmp_path) -> None:
    (tmp_path / "checkpoints").mkdir()
    os.mkfifo(tmp_path / "checkpoints" / "best.json")  # opened, it would block the reader for good
    with pytest.raises(CheckpointError, match="is a FIFO, not a regular file"):
        read_best_record(tmp_path)
    (tmp_path / "checkpoints" / "best.json").unlink()
    _write(tmp_path, " " * (MAX_BEST_BYTES + 1))
    with pytest.raises(CheckpointError, match="is over 1 MiB"):
        read_best_record(tmp_path)
    _write(tmp_path, json.dumps(GOOD)[:20])
    with pytest.raises(CheckpointError, match="cannot read the run's best checkpoint record"):
        read_best_record(tmp_path)
