"""``torchwork tune``'s bounds: ``--trials`` and ``--workers`` capped before the storage is created (one line,
nothing written), queueing many trials says how far it is, and a space's ``1e-4`` (text to YAML 1.1) is read as
the number it is, as the recipe configs read it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import torchwork.tune.runner as runner
from torchwork.cli import main
from torchwork.errors import ConfigError
from torchwork.threads import usable_cpus
from torchwork.tune import study as study_module
from torchwork.tune.space import Space, read_space

CAP = max(8, 4 * usable_cpus())  # the most workers here


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused count must stop ``torchwork tune`` before the study (its storage, its queue) is touched."""
    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torchwork tune went on past a count it should have refused")

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    monkeypatch.setattr(runner, "tune", must_not_run)


@pytest.mark.parametrize("extra, words", [
    (["--trials", "20000"], "--trials 20000: over the 10,000"),
    (["--trials", "10001"], "--trials 10001: over the 10,000"),
    (["--trials", "2", "--workers", str(CAP + 1)], f"--workers {CAP + 1}: over the {CAP} this machine can run"),
    (["--trials", "2", "--workers", "100000"], "--workers 100000: over the"),
])
def test_too_many_trials_or_workers_are_refused_before_the_storage(tmp_path: Path, capsys, nothing_runs,
                                                                   extra: list[str], words: str) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("lr: {low: 1.0e-3, high: 0.1, log: true}\n")
    runs = tmp_path / "runs"
    assert main(["tune", "sentiment", "--space", str(space), "--set", f"run_dir={runs}", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchwork: error: "), err
    assert words in err[0], err[0]
    assert not runs.exists()


def test_the_caps_themselves_are_accepted() -> None:
    study_module.check_study_size(10_000, CAP)
    study_module.check_study_size(16, 8, cpus=1)  # a small machine still runs 8
    with pytest.raises(ConfigError, match="--workers 9: over the 8 this machine can run"):
        study_module.check_study_size(16, 9, cpus=2)
    with pytest.raises(ConfigError, match="--workers 17: over the 16 this machine can run"):
        study_module.check_study_size(16, 17, cpus=4)


def test_queueing_many_trials_says_how_far_it_is(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    monkeypatch.setattr(study_module, "QUEUE_NOTE_S", 0.0)  # every trial counts as slow
    space = Space.from_mapping({"lr": {"low": 0.001, "high": 0.1, "log": True}})
    lines: list[str] = []
    assert study_module.queue_missing(optuna.create_study(), space, 0, 3, say=lines.append) == 3
    assert lines[:2] == [f"tune: queued {n} of 3 trials in the study's storage (every trial is queued before any "
                         "runs)" for n in (1, 2)]
    assert lines[2].startswith("tune: queued 3 trials in ") and len(lines) == 3
    assert study_module.queue_missing(optuna.create_study(), space, 0, 2) == 2  # by default on stderr
    assert "tune: queued 1 of 2 trials" in capsys.readouterr().err
    monkeypatch.setattr(study_module, "QUEUE_NOTE_S", 3600.0)
    quiet: list[str] = []
    study_module.queue_missing(optuna.create_study(), space, 0, 3, say=quiet.append)
    assert quiet == []  # fast queueing says nothing


def test_a_space_number_yaml_reads_as_text_is_taken_as_the_number(tmp_path: Path) -> None:
    short, dotted = tmp_path / "short.yaml", tmp_path / "dotted.yaml"
    short.write_text("lr: {low: 1e-4, high: 1e-1, log: true}\nsize: {low: '16', high: 128, step: 16}\n")
    dotted.write_text("lr: {low: 1.0e-4, high: 1.0e-1, log: true}\nsize: {low: 16, high: 128, step: 16}\n")
    assert read_space(short).describe() == read_space(dotted).describe()  # the same study either way
    assert read_space(short).describe()["lr"]["low"] == 1e-4
    assert read_space(short, integer_fields={"size"}).describe()["size"]["type"] == "int"


@pytest.mark.parametrize("low, words", [
    ("'1e-4x'", "low must be a number (e.g. 1.0e-4 or 16), got '1e-4x'"),
    ("1e999", "low must be a finite number, got '1e999'"),
    ("nan", "low must be a finite number, got 'nan'"),
    ("'-inf'", "low must be a finite number, got '-inf'"),
])
def test_text_that_is_no_finite_number_is_still_refused(tmp_path: Path, low: str, words: str) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(f"lr: {{low: {low}, high: 0.1}}\n")
    with pytest.raises(ConfigError, match="lr: ") as caught:
        read_space(space)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_an_integer_too_long_to_print_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="got <an integer of 5001 digits or so>"):
        Space.from_mapping({"lr": {"low": 10**5000, "high": 1}})


def test_the_python_api_refuses_the_same_counts_before_the_storage(tmp_path: Path) -> None:
    from torchwork.tune.runner import TuneOptions, prepare

    runs = tmp_path / "runs"
    options = TuneOptions("sentiment", {"lr": {"low": 1e-3, "high": 0.1}}, trials=20_000,
                          settings=[f"run_dir={runs}"])
    with pytest.raises(ConfigError, match="--trials 20000: over the 10,000"):
        prepare(options)
    assert not runs.exists()


@pytest.mark.parametrize(("numbers", "message"), [
    ((1, 1, 10**400), "--timeout <an integer of 401 digits or so>: must be a positive"),  # was OverflowError
    ((10**5000, 1, None), "--trials <an integer of 5001 digits or so>: over the 10,000"),  # was ValueError
    ((-(10**5000), 1, None), "--trials <an integer of 5001 digits or so>: must be a whole number >= 1"),
    ((1, 10**5000, None), "--workers <an integer of 5001 digits or so>: over the"),
    ((2.5, 1, None), r"--trials 2\.5: must be a whole number >= 1"),  # TypeError from the range before
    ((2, True, None), "--workers True: must be a whole number >= 1"),  # one worker before
], ids=["timeout", "trials", "negative-trials", "workers", "fraction-trials", "bool-workers"])
def test_a_number_past_what_a_float_holds_or_repr_prints_is_refused_in_one_line(numbers, message) -> None:
    from torchwork.tune.runner import check_numbers

    with pytest.raises(ConfigError, match=message):
        check_numbers(*numbers)


@pytest.mark.parametrize(("settings", "message"), [
    ({"heartbeat_s": 0}, "heartbeat_s=0: whole seconds from 1 to 3,600"),  # reached optuna's storage
    ({"heartbeat_s": float("nan")}, "heartbeat_s=nan: whole seconds"),  # taken
    ({"grace_s": -1}, "grace_s=-1: whole seconds from 1 to 86,400"),
    ({"grace_s": 10**5000}, "grace_s=<an integer of 5001 digits or so>: whole seconds"),
], ids=["heartbeat-0", "heartbeat-nan", "grace-negative", "grace-5001-digits"])
def test_the_liveness_settings_are_refused_before_the_storage(tmp_path: Path, settings, message) -> None:
    from torchwork.tune.runner import TuneOptions, prepare

    runs = tmp_path / "runs"
    options = TuneOptions("sentiment", {"lr": {"low": 1e-3, "high": 0.1}}, trials=2, settings=[f"run_dir={runs}"],
                          **settings)
    with pytest.raises(ConfigError, match=message):
        prepare(options)
    assert not runs.exists()
