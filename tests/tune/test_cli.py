"""tune/cli.py: ``torchwork tune`` refuses an incomplete command line in one line before any study starts (no
--space or --trials; ``show`` without a study; a stray argument, a storage URL's password masked in the
message). Studies run in the other tests of tests/tune."""

from __future__ import annotations

import pytest

from torchwork.cli import build_parser
from torchwork.errors import TorchworkError
from torchwork.tune.cli import cli_main


def _parsed(*argv: str):
    return build_parser().parse_args(["tune", *argv])


@pytest.mark.parametrize(("argv", "message"), [
    (["sentiment", "--trials", "4"], "needs --space SPACE.yaml and --trials N"),
    (["sentiment", "--space", "space.yaml"], "needs --space SPACE.yaml and --trials N"),
    (["show"], "tune show needs a study folder"),
])
def test_an_incomplete_command_is_refused_before_any_study(argv, message, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TorchworkError, match=message):
        cli_main(_parsed(*argv))
    assert list(tmp_path.iterdir()) == []


def test_a_stray_argument_is_refused_with_any_password_in_it_masked() -> None:
    with pytest.raises(TorchworkError, match="unexpected argument") as refused:
        cli_main(_parsed("sentiment", "postgresql://me:hunter2@db/study"))
    assert "hunter2" not in str(refused.value)
