"""Every recipe setting is refused at parse time when it is out of what the work can take: seeds outside
[0, 2**32), learning rates and penalties past any sensible size (and past float32), counts past their caps,
fractions of an integer setting, a recipe that is not a name; each in one line naming the setting. The
commands say it as ``torchwork: error: ...`` with exit code 2, never a traceback; nothing trains."""

from __future__ import annotations

import pytest

from torchwork.errors import ConfigError
from torchwork.recipes.registry import resolve


@pytest.mark.parametrize(("assignments", "message"), [
    (["lr=1e308"], r"^lr: '1e308' is past what float32 holds \(about 3\.4e38\)"),
    (["l2=1e308"], r"^l2: '1e308' is past what float32 holds"),
    (["lr=1e30"], r"^lr=1e\+30: must be <= 10\.$"),
    (["l2=11"], r"^l2=11\.0: must be <= 10\.$"),
    (["transformer_lr=100"], r"^transformer_lr=100\.0: must be <= 10\.$"),
    (["clip_grad_norm=1e10"], r"^clip_grad_norm=10000000000\.0: must be <= 1000000\.$"),
    (["batch_size=99999999999999999999999"], r"^batch_size: '99999999999999999999999' is too large for an "
                                             r"integer setting \(at most 2\*\*63 - 1\)"),
    (["batch_size=2000000"], r"^batch_size=2000000: must be <= 1048576\.$"),
    (["epochs=1000000"], r"^epochs=1000000: must be <= 10000\.$"),
    (["subset=10000000000"], r"^subset=10000000000: must be <= 1000000000\.$"),
    (["seed=4294967296"], r"^seed=4294967296: must be <= 4294967295 \(2\*\*32 - 1"),
    (["seed=-1"], r"^seed=-1: must be >= 0\.$"),  # once, not twice
    (["transformer_max_length=-1"], r"^transformer_max_length=-1: use 0 \(chosen from the data\) or >= 8 "),
    (["subset=-1"], r"^subset=-1: use 0 \(all rows\) or >= 200"),
])
def test_a_value_past_what_the_recipe_takes_is_refused_before_any_work(assignments, message) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve("sentiment", assignments)


def test_a_huge_transformer_max_length_is_not_echoed_digit_by_digit() -> None:
    with pytest.raises(ConfigError) as caught:
        resolve("sentiment", ["transformer_max_length=1e308"])
    assert len(str(caught.value)) < 200 and "transformer_max_length" in str(caught.value)


@pytest.mark.parametrize(("value", "shown"), [(10**5000, "<an integer of 5001 digits or so>"),
                                             (10**400, "<an integer of 401 digits or so>")],
                         ids=["5001-digits", "401-digits"])
def test_an_integer_past_what_a_float_holds_is_refused_by_name_from_python(value, shown) -> None:
    # apply_overrides once raised ValueError (repr refuses 4,300 digits) and validate() OverflowError ('.3g')
    from torchwork.recipes.config import apply_overrides
    from torchwork.recipes.sentiment import SentimentConfig

    with pytest.raises(ConfigError, match=f"^epochs: {shown} is too large; use a number of a sensible size"):
        apply_overrides(SentimentConfig(), {"epochs": value})
    with pytest.raises(ConfigError, match=f"^epochs={shown}: must be <= 10000"):
        SentimentConfig(epochs=value).validate()


def test_the_bounds_hold_the_defaults_and_the_largest_allowed_values() -> None:
    _, config = resolve("sentiment", ["lr=10", "l2=10", "batch_size=1048576", "seed=4294967295", "epochs=10000"])
    assert (config.lr, config.l2, config.batch_size, config.seed) == (10.0, 10.0, 2**20, 2**32 - 1)
    assert resolve("fashion", ["lr=10", "seed=4294967295"])[1].seed == 2**32 - 1


@pytest.mark.parametrize(("assignments", "message"), [
    (["lr=1e30"], r"^lr=1e\+30: must be <= 10\.$"),
    (["batch_size=2000000"], r"^batch_size=2000000: must be <= 1048576\.$"),
    (["seed=4294967296"], r"^seed=4294967296: must be <= 4294967295"),
    (["subset=-1"], r"^subset=-1: use 0 \(all rows\) or >= 100"),
    (["channels=100000"], r"^channels=100000: must be <= 1024\.$"),
])
def test_the_fashion_recipe_has_the_same_bounds(assignments, message) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve("fashion", assignments)


@pytest.mark.parametrize(("line", "message"), [
    ("seed: 1.5", r"^seed: expected an integer, got 1\.5"),
    ("batch_size: 0.5", r"^batch_size: expected an integer, got 0\.5"),
    ("epochs: 2.25", r"^epochs: expected an integer, got 2\.25"),
])
def test_a_yaml_fraction_for_an_integer_setting_is_refused_not_truncated(tmp_path, line, message) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(f"recipe: sentiment\n{line}\n")
    with pytest.raises(ConfigError, match=message):
        resolve(str(path))
    path.write_text("recipe: sentiment\nseed: 2.0\n")
    assert resolve(str(path))[1].seed == 2  # a whole number written as a float is that number


@pytest.mark.parametrize("recipe", ["[sentiment]", "{name: sentiment}", "3"])
def test_a_recipe_that_is_not_a_name_is_one_line(tmp_path, recipe) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(f"recipe: {recipe}\nepochs: 2\n")
    with pytest.raises(ConfigError, match=r"must be one recipe's name, e\.g\. 'recipe: sentiment'"):
        resolve(str(path))


def test_the_settings_table_of_an_unknown_recipe_is_one_line_and_exit_2(capsys) -> None:
    from torchwork.recipes.settings import main

    assert main(["bogus"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "torchwork: error: unknown recipe 'bogus'; recipes: sentiment, fashion.\n"


def test_a_fashion_setting_given_to_the_sentiment_quickstart_names_the_recipe_it_needs() -> None:
    from torchwork.recipes.registry import quickstart_config

    with pytest.raises(ConfigError, match=r"^pretrained is a setting of the fashion recipe, not of sentiment: "
                                          r"add --recipe fashion\.$"):
        quickstart_config("sentiment", ["pretrained=true"])
    with pytest.raises(ConfigError, match=r"^model is a setting of the sentiment recipe, not of fashion"):
        quickstart_config("fashion", ["model=ngram"])
    assert quickstart_config("fashion", ["pretrained=true"])[1].pretrained is True


def test_a_min_freq_that_leaves_no_word_is_refused_before_the_run_folder(tmp_path) -> None:
    from torchwork.data import TextDataset
    from torchwork.recipes.sentiment import fit_ngram

    texts = [f"day {i} was {'fine' if i % 2 else 'bad'}" for i in range(40)]
    train = TextDataset(texts, [i % 2 for i in range(40)])
    _, config = resolve("sentiment", [f"run_dir={tmp_path / 'runs'}", "min_freq=1000000000", "epochs=1",
                                      "precision=32", "threads=1"])
    with pytest.raises(ConfigError, match=r"^min_freq=1000000000: no word occurs that often in the 40 training "
                                          r"texts, so the vocabulary would be empty"):
        fit_ngram(config, train, train, ["bad", "fine"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("assignments", "message"), [
    # lr=1e30 trained a NaN model that was exported, verified and served; image_size=50000 was numpy's
    # MemoryError for 503 GiB; a misspelt format was refused by the export, after all the training
    (["lr=1e30"], r"^lr=1e\+30: must be <= 10\.$"),
    (["pretrained_lr=100"], r"^pretrained_lr=100\.0: must be <= 10\.$"),
    (["image_size=50000"], r"^image_size=50000: must be <= 1024\.$"),
    (["cnn_size=4096"], r"^cnn_size=4096: must be <= 1024\.$"),
    (["channels=1000000"], r"^channels=1000000: must be <= 1024\.$"),
    (["epochs=1000000"], r"^epochs=1000000: must be <= 10000\.$"),
    (["batch_size=2000000"], r"^batch_size=2000000: must be <= 1048576\.$"),
    (["export_formats=onxx"], r"^export_formats=\['onxx'\]: choose one or more of pt2, onnx, torchscript"),
    (["export_formats=pt2"], r"^quantize=true makes the INT8 variant of the ONNX model, and export_formats="
                             r"\['pt2'\] has no onnx"),
])
def test_an_image_fit_setting_past_what_the_work_takes_is_refused_before_any_work(assignments, message) -> None:
    import argparse

    from torchwork.recipes.cli import image_fit_config

    with pytest.raises(ConfigError, match=message):
        image_fit_config(argparse.Namespace(data="photos", quick=True, set=assignments))
    bounds = image_fit_config(argparse.Namespace(data="photos", quick=True, set=["lr=10", "image_size=1024",
                                                                                  "export_formats=pt2",
                                                                                  "quantize=false"]))
    assert (bounds.lr, bounds.image_size, bounds.export_formats) == (10.0, 1024, ("pt2",))


def test_a_text_fit_asking_int8_without_onnx_is_refused_before_any_work() -> None:
    """`--set export_formats=pt2` with quantize on (the default) trained, then failed in the export."""
    with pytest.raises(ConfigError, match=r"^quantize=true makes the INT8 variant .* or set quantize=false\.$"):
        resolve("sentiment", ["export_formats=pt2"])
    assert resolve("sentiment", ["export_formats=pt2", "quantize=false"])[1].export_formats == ("pt2",)
