"""Bad input to ``torchwork tune``: one line naming the problem, exit code 2, before any trial, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchwork.cli import main

SPACE = "lr: {low: 1.0e-3, high: 0.1, log: true}\n"


def _tune(tmp_path: Path, *extra: str, space: str | None = SPACE, target: str = "sentiment") -> list[str]:
    args = ["tune", target, "--trials", "2", "--set", f"run_dir={tmp_path / 'runs'}", "--set", "subset=300"]
    if space is not None:
        path = tmp_path / "space.yaml"
        path.write_text(space)
        args += ["--space", str(path)]
    return [*args, *extra]


def _refused(capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchwork: error: "), err
    assert message in err[0], err[0]


@pytest.mark.parametrize("space, message", [
    ("lr: {low: 1.0e-3, high: 0.1\n", "is not valid YAML"),
    ("learing_rate: {low: 1.0e-3, high: 0.1}\n", "unknown setting 'learing_rate' (did you mean 'lr'?)"),
    ("lr: {low: 0.1, high: 0.01}\n", "low (0.1) must be below high (0.01)"),
    ("epochs: {choices: [0, 4]}\n", "epochs=0: must be >= 1"),
    ("- lr\n", "must hold a mapping"),
])
def test_a_bad_space_is_refused(tmp_path, capsys, space, message) -> None:
    _refused(capsys, _tune(tmp_path, space=space), message)
    assert not (tmp_path / "runs").exists()


def test_a_missing_recipe_or_space_is_refused(tmp_path, capsys) -> None:
    _refused(capsys, _tune(tmp_path, target="sentimnt"), "unknown recipe 'sentimnt'. Did you mean 'sentiment'?")
    _refused(capsys, [*_tune(tmp_path, space=None), "--space", str(tmp_path / "none.yaml")], "does not exist")
    _refused(capsys, _tune(tmp_path, space=None), "needs --space SPACE.yaml and --trials N")
    _refused(capsys, _tune(tmp_path, target="fashion"), "recipe 'fashion' has no validation objective")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("extra, message", [
    (["--workers", "0"], "--workers 0: must be a whole number >= 1"),
    (["--timeout", "nan"], "--timeout nan: must be a positive number"),
    (["--timeout", "-5"], "--timeout -5.0: must be a positive number"),
    (["--study", "../up"], "--study '../up': use letters"),
    (["--storage", "redis://localhost"], "use postgresql://"),
])
def test_bad_numbers_and_names_are_refused(tmp_path, capsys, extra, message) -> None:
    _refused(capsys, _tune(tmp_path, *extra), message)
    assert not (tmp_path / "runs").exists()


def test_trials_zero_is_refused(tmp_path, capsys) -> None:
    argv = _tune(tmp_path)
    argv[argv.index("--trials") + 1] = "0"
    _refused(capsys, argv, "--trials 0: must be a whole number >= 1")


def test_an_unreachable_storage_is_refused_and_nothing_is_written(tmp_path, capsys) -> None:
    url = "postgresql://tuner:secret@127.0.0.1:9/studies"  # port 9 (discard): nothing listens
    _refused(capsys, _tune(tmp_path, "--storage", url), "cannot open the study storage postgresql://tuner:***@")
    assert not (tmp_path / "runs").exists()


def test_a_study_with_another_space_or_seed_is_refused(tmp_path, capsys) -> None:
    from torchwork.tune.runner import TuneOptions, prepare

    (tmp_path / "first.yaml").write_text(SPACE)
    prepared = prepare(TuneOptions("sentiment", str(tmp_path / "first.yaml"), trials=2, study="s",
                                   settings=[f"run_dir={tmp_path / 'runs'}", "subset=300"]))
    before = sorted(p.name for p in prepared["folder"].iterdir())
    _refused(capsys, _tune(tmp_path, "--study", "s", space="lr: {low: 1.0e-4, high: 0.1, log: true}\n"),
             "study 's' exists with another space")
    _refused(capsys, _tune(tmp_path, "--study", "s", "--seed", "1"), "study 's' exists with another seed")
    _refused(capsys, _tune(tmp_path, "--study", "s", "--set", "lr=0.5"), "exists with another recipe and --set")
    assert sorted(p.name for p in prepared["folder"].iterdir()) == before
    assert len(prepared["study"].get_trials()) == 2  # nothing queued by the refused runs


def test_a_study_with_another_direction_is_refused(tmp_path, capsys) -> None:
    import optuna

    from torchwork.tune.storage import default_url, open_storage

    folder = tmp_path / "runs" / "tune" / "s"
    folder.mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(storage=open_storage(default_url(folder)), study_name="s", direction="minimize")
    _refused(capsys, _tune(tmp_path, "--study", "s"), "study 's' exists with direction minimize, not maximize")


def test_show_never_creates_the_study_file_a_url_names(tmp_path, capsys, monkeypatch) -> None:
    """`tune show sqlite:///nope.db` (a mistyped path) wrote a 114 KB empty Optuna database, then said it held
    "0 studies; name one with --study ()"."""
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "show", "sqlite:///nope.db"]) == 2
    assert "sqlite:///nope.db: no such study file (nope.db)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty.db"
    import sqlite3

    sqlite3.connect(empty).close()  # an SQLite file, but no Optuna study in it
    assert main(["tune", "show", f"sqlite:///{empty}"]) == 2
    assert "study.db is damaged: it lacks Optuna's tables" in capsys.readouterr().err
