"""data/cli.py: ``torchwork data describe DATASET`` prints the splits per class, ``profile`` refuses a bad
``--workers`` in one line, and ``--json`` prints a profile a program can read (two timed batches, no model
step: the measurements themselves are pinned in tests/data/test_data_profile.py)."""

from __future__ import annotations

import json

import pytest

from torchwork.cli import build_parser
from torchwork.data.cli import cli_main
from torchwork.errors import ConfigError


def test_describe_prints_every_split_of_every_class(capsys) -> None:
    assert cli_main(build_parser().parse_args(["data", "describe", "digits", "--seed", "1"])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "digits: 1,797 rows, 10 classes, seed 1"
    assert lines[2].split() == ["class", "train", "validation", "test", "total"]
    assert lines[-1].split()[0] == "total" and lines[-1].split()[-1] == "1,797"


def test_profile_refuses_workers_that_are_not_integers() -> None:
    with pytest.raises(ConfigError, match=r"--workers '0,two' must be comma-separated integers"):
        cli_main(build_parser().parse_args(["data", "profile", "digits", "--workers", "0,two"]))


def test_profile_as_json_has_one_row_per_workers_setting(capsys) -> None:
    argv = ["data", "profile", "digits", "--workers", "0", "--batches", "2", "--warmup", "0", "--model", "none",
            "--json"]
    assert cli_main(build_parser().parse_args(argv)) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["num_workers"] for row in report["rows"]] == [0]
