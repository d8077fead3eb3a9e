"""Hostile spaces and study files (issue 49, item 7): refused before any trial in one line, or read back in one
line; setting names shown as plain text; a study with no complete trial fails the command."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fifo_guard import returns_within
from tune_helpers import environment

from torchwork.cli import main

# nine levels of nine aliases: 9^9 (387 million) strings once expanded, from 342 bytes of YAML
ALIAS_BOMB = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi")) + "lr: {choices: *i}\n"


@pytest.fixture(autouse=True)
def _passive_waiting(monkeypatch):
    """The command sets OMP_WAIT_POLICY when torch is not imported yet: set here, so that the test leaves the
    environment as it found it."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")


def _refused(capsys, tmp_path: Path, space: str, message: str) -> None:
    (tmp_path / "space.yaml").write_text(space)
    argv = ["tune", "sentiment", "--trials", "2", "--space", str(tmp_path / "space.yaml"),
            "--set", f"run_dir={tmp_path / 'runs'}", "--set", "subset=300"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchwork: error: ") and len(err[0]) < 600, err[:3]
    assert message in err[0], err[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("space, message", [
    (ALIAS_BOMB, "aliases (*a) are not supported in a search space"),
    ("lr: {low: -1.0e+308, high: 1.0e+308}\n", "high - low overflows"),
    ("lr: {low: 0.0, high: 1.0, step: 1.0e-300}\n", "makes 1e+300 grid points from 0.0 to 1.0, over the 1,000,000"),
    ("lr: {low: 0.0, high: 1.0, step: .inf}\n", "step must be a finite number"),
    ("lr: {choices: [" + ", ".join(str(i / 10**5) for i in range(1, 10_002)) + "]}\n",
     "10001 choices, over the 10000 a setting may have"),
    ("lr: {choices: [" + ", ".join(str(i) for i in range(10**6)) + "]}\n", "is over 1 MiB"),
])
def test_a_space_that_cannot_be_sampled_is_refused_in_one_line(tmp_path, capsys, within, space, message) -> None:
    with within(30):
        _refused(capsys, tmp_path, space, message)


def _frozen(number: int, value: float, params: dict, distributions: dict):
    import optuna

    return optuna.trial.create_trial(params=params, distributions=distributions, value=value,
                                     user_attrs={"trial": number, "attempt": 0, "epochs": 2, "seconds": 1.5})


def test_setting_names_and_choices_are_plotted_as_plain_text() -> None:
    from torchwork.tune.report import history_png, params_png
    from torchwork.tune.space import Space

    # each a matplotlib mathtext ("$...$") its parser refuses: drawn as such, it fails the report
    space = Space.from_mapping({r"$\frac{a}{$": {"choices": ["$x^$", "$$"]}, r"$\foo$": {"low": 0.1, "high": 1.0}})
    distributions = space.distributions()
    attempts = {n: _frozen(n, 0.5 + n / 10, space.params_for(n, 0), distributions) for n in range(3)}
    for png in (params_png(attempts, space, r"$\sqrt{$"), history_png(attempts, True, r"$\sqrt{$")):
        assert png.startswith(b"\x89PNG")


def _sql(*statements: str) -> Callable[[Path], None]:
    def tamper(path: Path) -> None:
        connection = sqlite3.connect(path)
        try:
            for statement in statements:
                connection.execute(statement)
            connection.commit()
        finally:
            connection.close()

    return tamper


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _noise(path: Path) -> None:
    path.write_bytes(random.Random(0).randbytes(path.stat().st_size))


def _noise_after_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[100:4096] = random.Random(1).randbytes(3996)
    path.write_bytes(bytes(data))


TAMPERINGS = {
    "truncated": _cut, "random bytes": _noise, "pages overwritten": _noise_after_header,
    "empty": lambda path: path.write_bytes(b""),
    "trials dropped": _sql("DROP TABLE trials"), "values dropped": _sql("DROP TABLE trial_values"),
    "state garbage": _sql("UPDATE trials SET state = 'BOGUS'"),
    "value garbage": _sql("UPDATE trial_values SET value = 'abc'"),
    "start time garbage": _sql("UPDATE trials SET datetime_start = 'not a date'"),
    "attribute not JSON": _sql("UPDATE trial_user_attributes SET value_json = '{' WHERE key = 'epochs'"),
    "trial number a string": _sql("UPDATE trial_user_attributes SET value_json = '\"seven\"' "
                                  "WHERE key = 'trial' AND trial_id = 2"),
    "attempt a list": _sql("UPDATE trial_user_attributes SET value_json = '[1]' WHERE key = 'attempt'"),
    "distribution unknown": _sql("UPDATE trial_params SET distribution_json = '{\"name\": \"Nope\"}'"),
}


@pytest.fixture(scope="module")
def study_db(tmp_path_factory) -> Path:
    """A small study file written by Optuna: three complete trials as the tuner records them."""
    import optuna

    from torchwork.tune.space import Space
    from torchwork.tune.storage import default_url, open_storage

    folder = tmp_path_factory.mktemp("study") / "s"
    folder.mkdir()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(default_url(folder))
    study = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    space = Space.from_mapping({"lr": {"low": 0.001, "high": 0.1, "log": True}})
    for n in range(3):
        study.add_trial(_frozen(n, 0.5 + n / 10, space.params_for(n, 0), space.distributions()))
    storage.engine.dispose()  # the last connection closed: the WAL is folded into study.db
    assert sorted(p.name for p in folder.iterdir()) == ["study.db"]
    return folder


def test_show_reads_the_untouched_study(study_db, tmp_path, capsys) -> None:
    shutil.copytree(study_db, tmp_path / "s")
    assert main(["tune", "show", str(tmp_path / "s")]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if "COMPLETE" in line]) == 3


@pytest.mark.parametrize("tamper", list(TAMPERINGS))
def test_show_of_a_tampered_study_is_one_line(study_db, tmp_path, capsys, tamper) -> None:
    folder = tmp_path / "s"
    shutil.copytree(study_db, folder)
    TAMPERINGS[tamper](folder / "study.db")
    assert main(["tune", "show", str(folder)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"torchwork: error: {folder}: "), captured.err[-2000:]
    assert "damaged" in err[0] and "Traceback" not in captured.err + captured.out


def test_a_study_with_no_complete_trial_fails_the_command(tmp_path) -> None:
    (tmp_path / "space.yaml").write_text("lr: {choices: [0.01]}\nepochs: {choices: [1]}\n")
    (tmp_path / "header-only.csv").write_text("text,label\n")  # every trial fails reading it (a lr of 1e30 that
    # diverged did before: the recipe's bounds now refuse it with the space, before any trial)
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "tune", "sentiment", "--space",
                           str(tmp_path / "space.yaml"), "--trials", "1", "--study", "s", "--no-final",
                           "--set", f"run_dir={tmp_path / 'runs'}", "--set", f"data={tmp_path / 'header-only.csv'}"],
                          env=environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    folder = tmp_path / "runs" / "tune" / "s"
    assert (f"torchwork tune: no trial of study s completed (1 failed, 0 pruned, 0 unfinished): each trial's error "
            f"is in {folder}/trials/<n>/trial.json.") in done.stderr
    assert (folder / "report.html").is_file() and "Traceback" not in done.stderr


class _NoTraining:
    """A target whose run must not happen: the recorded result is read, or refused."""

    def run(self, *args, **kwargs):
        raise AssertionError("the defaults were trained again")


def test_the_recorded_defaults_result_is_read_bounded_inside_the_study_folder(tmp_path) -> None:
    import json

    from torchwork.errors import ConfigError
    from torchwork.tune.results import defaults_score

    study = tmp_path / "study"
    (study / "defaults").mkdir(parents=True)
    prepared = {"target": _NoTraining(), "folder": study, "study": None}
    recorded = study / "defaults" / "result.json"
    recorded.write_text(json.dumps({"value": 0.5, "epochs": 2, "run": "defaults/run"}))
    assert defaults_score(prepared, 1) == {"value": 0.5, "epochs": 2, "run": "defaults/run"}
    recorded.unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"value": 0.9, "epochs": 1, "run": "x"}))
    recorded.symlink_to(tmp_path / "elsewhere.json")  # another study's result is not this one's
    with pytest.raises(ConfigError, match="leading out of its run folder"):
        defaults_score(prepared, 1)
    recorded.unlink()
    with recorded.open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: refused unread, over the 16 MiB
    with pytest.raises(ConfigError, match="is over 16 MiB"):
        defaults_score(prepared, 1)


def test_the_rerun_best_json_that_is_a_fifo_is_refused_not_waited_on(tmp_path, monkeypatch) -> None:
    import os

    import torchwork.recipes.registry as registry
    from torchwork.errors import ConfigError
    from torchwork.tune.results import rerun_best

    run = tmp_path / "best" / "run"
    (run / "checkpoints").mkdir(parents=True)
    os.mkfifo(run / "checkpoints" / "best.json")  # read as before, it would block the study's end for ever
    monkeypatch.setattr(registry, "resolve", lambda path: ("sentiment", {}))
    monkeypatch.setattr(registry, "run_recipe", lambda name, config: {"report": str(run / "report.html"),
                                                                      "test": {"macro_f1": 0.5}})
    with pytest.raises(ConfigError, match="best.json is a FIFO, not a regular file"):
        returns_within(10, lambda: rerun_best(tmp_path / "best.yaml"), run / "checkpoints" / "best.json")
