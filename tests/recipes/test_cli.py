"""recipes/cli.py: the recipes' commands turn the parsed arguments into the work function's call, and refuse bad
ones before any work: ``fit``'s settings for the sentiment recipe, an image folder's config and the text
options it refuses, ``--time-budget`` read first, ``train`` validating its recipe
before launching anything, ``data check``'s report, its exit code (what ``fit`` would stop on) and the
settings it reads. The trainings themselves run in
tests/recipes/test_recipes_fit*.py and the quickstart's tests."""

from __future__ import annotations

import json

import pytest

from torchwork.cli import build_parser
from torchwork.errors import ConfigError
from torchwork.recipes.cli import cli_data, cli_fit, cli_train, fit_settings, image_fit_config


def _parsed(*argv: str):
    return build_parser().parse_args(list(argv))


def test_fit_settings_are_the_users_file_columns_model_and_sets_in_that_order() -> None:
    args = _parsed("fit", "reviews.csv", "--text", "body", "--test", "held.csv", "--set", "epochs=3", "--set", "seed=2")
    assert fit_settings(args) == ["run_dir=runs/fit", "data=reviews.csv", "model=transformer",
                                  "transformer_max_length=0", "text=body", "test_data=held.csv", "epochs=3", "seed=2"]
    assert "model=ngram" in fit_settings(_parsed("fit", "reviews.csv", "--quick"))
    assert "model_dir=encoders/bert" in fit_settings(_parsed("fit", "reviews.csv", "--model", "encoders/bert"))


def test_an_image_folder_takes_the_quick_settings_and_refuses_a_tables_options() -> None:
    quick = image_fit_config(_parsed("fit", "photos", "--quick", "--set", "seed=3"))
    assert (quick.data, quick.epochs, quick.seed) == ("photos", 1, 3)
    with pytest.raises(ConfigError, match=r"photos is an image folder: --text, --time-budget apply to a text file"):
        image_fit_config(_parsed("fit", "photos", "--text", "body", "--time-budget", "5m"))


@pytest.mark.parametrize(("argv", "message"), [
    (["--time-budget", "soon", "--quick"], "--time-budget 'soon'"),
    (["--time-budget", "nan"], "--time-budget 'nan'"),  # without --quick too: the encoder's budget
])
def test_a_time_budget_is_read_before_any_work(tmp_path, argv, message) -> None:
    missing = tmp_path / "nothing-here.csv"  # never read: the budget is refused first
    with pytest.raises(ConfigError, match=message):
        cli_fit(_parsed("fit", str(missing), *argv))


def test_an_image_folder_given_a_budget_is_refused_with_the_folders_own_words(tmp_path) -> None:
    (tmp_path / "cats").mkdir()
    with pytest.raises(ConfigError, match="is an image folder: --time-budget applies to a text file only"):
        cli_fit(_parsed("fit", str(tmp_path), "--quick", "--time-budget", "15m"))


def test_train_refuses_an_unknown_recipe_before_launching_processes() -> None:
    with pytest.raises(ConfigError, match="unknown recipe 'sentimnet'. Did you mean 'sentiment'"):
        cli_train(_parsed("train", "sentimnet", "--nproc", "2"))


def test_data_check_prints_the_report_as_json_and_exits_1_when_the_test_file_leaks(tmp_path) -> None:
    rows = "note,mood\n" + "".join(f"day {i} was fine,up\nday {i} was bad,down\n" for i in range(9))
    (tmp_path / "notes.csv").write_text(rows)
    (tmp_path / "held.csv").write_text(rows)  # every test row is also a training row
    said: list[str] = []
    assert cli_data(_parsed("data", "check", str(tmp_path / "notes.csv"), "--json"), label_noise=False,
                    say=said.append) == 0
    assert set(json.loads(said[-1])["splits"]) == {"train", "validation", "test"}
    said.clear()
    leaky = _parsed("data", "check", str(tmp_path / "notes.csv"), "--test", str(tmp_path / "held.csv"), "--json")
    assert cli_data(leaky, label_noise=False, say=said.append) == 1
    errors = [f["kind"] for f in json.loads(said[-1])["findings"] if f["severity"] == "error"]
    assert errors == ["cross-split-duplicate"]


def test_data_check_reads_fits_settings_of_the_report_and_exits_as_fit_would_go_on(tmp_path) -> None:
    rows = "note,mood\n" + "".join(f"day {i} was fine,up\nday {i} was bad,{'DOWN' if i < 3 else 'down'}\n"
                                    for i in range(12))
    (tmp_path / "notes.csv").write_text(rows)
    (tmp_path / "held.csv").write_text("note,mood\nday 5 was fine,up\nday 40 was bad,down\nday 41 was ok,up\n")
    said: list[str] = []
    check = ["data", "check", str(tmp_path / "notes.csv"), "--json"]
    assert cli_data(_parsed(*check), label_noise=False, say=said.append) == 1
    assert [f["kind"] for f in json.loads(said[-1])["findings"] if f["severity"] == "error"] == ["label-variants"]
    assert cli_data(_parsed(*check, "--set", "merge_label_variants=true"), label_noise=False, say=said.append) == 0
    merged = json.loads(said[-1])
    assert merged["source"]["merged_labels"] == {"DOWN": "down"}
    assert sum(merged["splits"]["train"]["classes"].values()) == merged["splits"]["train"]["rows"]

    leaky = [*check, "--test", str(tmp_path / "held.csv"), "--set", "merge_label_variants=true"]
    assert cli_data(_parsed(*leaky), label_noise=False, say=said.append) == 1
    said.clear()
    assert cli_data(_parsed(*leaky, "--set", "drop_leaked=true"), label_noise=False, say=said.append) == 0
    report = json.loads(said[-1])  # the leak is still reported, and left out of the test split
    assert [f["kind"] for f in report["findings"] if f["severity"] == "error"] == ["cross-split-duplicate"]
    assert report["splits"]["test"]["rows"] == 2 and report["source"]["drop_leaked"] is True
    assert merged["source"]["drop_leaked"] is False


@pytest.mark.parametrize(("setting", "message"), [
    ("epochs=3", r"--set epochs: data check reads only the settings that change the data report \(drop_leaked, "
                 r"merge_label_variants, transformer_max_length\); epochs is not one of them"),
    ("drop_leakd=true", "did you mean drop_leaked"),
    ("transformer_max_length=4", "transformer_max_length"),
    ("merge_label_variants=maybe", "merge_label_variants"),
])
def test_data_check_refuses_a_setting_it_does_not_read_or_a_bad_value_before_reading(tmp_path, setting,
                                                                                   message) -> None:
    with pytest.raises(ConfigError, match=message):  # the file does not exist: never read
        cli_data(_parsed("data", "check", str(tmp_path / "absent.csv"), "--set", setting), label_noise=False)


def test_an_image_folder_refuses_a_text_files_settings(tmp_path) -> None:
    (tmp_path / "cats").mkdir()
    with pytest.raises(ConfigError, match="is an image folder: --set apply to a text table only"):
        cli_data(_parsed("data", "check", str(tmp_path), "--set", "drop_leaked=true"), label_noise=False)
