"""The recipes' commands refuse a bad argument in one line (``torchwork: error: ...``, exit 2) before any file
is read or process started: ``fit``'s ``--set`` of a setting it takes from its own arguments (which would
silently win over them), a seed outside [0, 2**32) (digits, fit, data check), ``train``'s launch counts,
``quickstart --pretrained`` without the fashion recipe."""

from __future__ import annotations

import pytest

from torchwork.cli import build_parser, main
from torchwork.errors import ConfigError
from torchwork.recipes.cli import fit_settings


@pytest.fixture(autouse=True)
def _no_work(monkeypatch) -> None:
    """Nothing here may train or launch: a check missed fails the test at once instead."""
    import subprocess

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads

    def refused(*args, **kwargs):
        raise AssertionError("the work started: the bad argument was not refused first")

    monkeypatch.setattr("torchwork.recipes.registry.run_recipe", refused)
    monkeypatch.setattr(subprocess, "run", refused)


def _refused(argv: list[str], capsys) -> str:
    """The one error line of ``torchwork ARGV``, which exits 2 and prints nothing else."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchwork: error: "), captured.err
    return lines[0].removeprefix("torchwork: error: ")


@pytest.mark.parametrize(("setting", "words"), [
    ("data=", "give the file as fit's first argument: torchwork fit FILE"),
    ("data=test.csv", "give the file as fit's first argument"),
    ("model=transformer", "add --quick for the n-gram model, leave it out for the fine-tuned transformer"),
    ("text=body", "use --text COLUMN"),
    ("label=mood", "use --label COLUMN"),
    ("test_data=held.csv", "use --test FILE"),
    ("model_dir=encoders/bert", "use --model DIR"),
])
def test_fit_refuses_a_set_of_a_setting_it_takes_from_its_own_arguments(tmp_path, capsys, setting, words) -> None:
    missing = tmp_path / "medium.csv"  # never read: refused first
    message = _refused(["fit", str(missing), "--quick", "--set", setting], capsys)
    key = setting.partition("=")[0]
    assert message.startswith(f"--set {key}=...: fit sets {key} from its own arguments; ") and words in message
    with pytest.raises(ConfigError, match=f"^--set {key}=...: fit sets {key}"):
        fit_settings(build_parser().parse_args(["fit", str(missing), "--set", "seed=1", "--set", setting]))


def test_fit_keeps_the_users_run_dir_and_other_settings() -> None:
    args = build_parser().parse_args(["fit", "a.csv", "--quick", "--set", "run_dir=elsewhere", "--set", "seed=3"])
    assert fit_settings(args)[-2:] == ["run_dir=elsewhere", "seed=3"]


def test_an_image_folder_refuses_a_set_of_its_data(tmp_path) -> None:
    from torchwork.recipes.cli import image_fit_config

    with pytest.raises(ConfigError, match=r"^--set data=\.\.\.: fit sets data from its own arguments"):
        image_fit_config(build_parser().parse_args(["fit", str(tmp_path), "--set", f"data={tmp_path}/other"]))


@pytest.mark.parametrize(("argv", "message"), [
    (["digits", "--seed", "4294967296"], "seed=4294967296: must be <= 4294967295 (2**32 - 1, the largest seed "
                                         "NumPy and scikit-learn take)."),
    (["digits", "--epochs", "1000000"], "epochs=1000000: must be <= 10000."),
    (["data", "check", "small.csv", "--seed", "-1"], "--seed=-1: must be >= 0."),
    (["data", "check", "small.csv", "--seed", "4294967296"], "--seed=4294967296: must be <= 4294967295"),
    (["fit", "medium.csv", "--quick", "--set", "seed=4294967296"], "seed=4294967296: must be <= 4294967295"),
    (["fit", "medium.csv", "--quick", "--set", "lr=1e30"], "lr=1e+30: must be <= 10."),
    (["fit", "medium.csv", "--quick", "--set", "min_freq=2000000000"], "min_freq=2000000000: must be <= 1000000000."),
])
def test_a_seed_or_setting_out_of_range_is_one_line_before_any_file_is_read(tmp_path, monkeypatch, capsys, argv,
                                                                            message) -> None:
    monkeypatch.chdir(tmp_path)  # small.csv and medium.csv do not exist: nothing is read
    assert _refused(argv, capsys).startswith(message)


@pytest.mark.parametrize(("argv", "message"), [
    (["--nproc", "-3"], "--nproc -3: need at least one process per node."),
    (["--nproc", "1", "--nnodes", "0"], "--nnodes 0: need at least one machine"),
    (["--nproc", "1", "--nnodes", "-1"], "--nnodes -1: need at least one machine"),
    (["--nproc", "1", "--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1"],
     "--node-rank 2 must be in [0, 2)"),
    (["--nproc", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", "99999"],
     "--master-port 99999: use a TCP port in 1..65535"),
])
def test_train_refuses_launch_arguments_before_launching_or_training(capsys, argv, message) -> None:
    assert _refused(["train", "sentiment", *argv], capsys).startswith(message)


def test_quickstart_pretrained_without_the_fashion_recipe_says_to_add_it(capsys) -> None:
    assert _refused(["quickstart", "--pretrained"], capsys) == ("pretrained is a setting of the fashion recipe, "
                                                                "not of sentiment: add --recipe fashion.")
