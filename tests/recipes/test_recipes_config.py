"""Recipe configs: YAML + --set overrides, validated with clear errors."""

from __future__ import annotations

import pytest
from fifo_guard import returns_within

from torchwork.errors import ConfigError
from torchwork.recipes.registry import resolve


def test_yaml_config_and_overrides(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("recipe: sentiment\nepochs: 7\nlr: 0.01\nexport_formats: [onnx]\n")
    name, config = resolve(str(path), ["batch_size=128", "chars=false"])
    assert name == "sentiment"
    assert (config.epochs, config.lr, config.batch_size, config.chars) == (7, 0.01, 128, False)
    assert config.export_formats == ("onnx",)


@pytest.mark.parametrize(("assignment", "message"), [
    ("epoch=3", "unknown setting 'epoch'.*Did you mean 'epochs'"),
    ("epochs=three", "epochs: expected int"),
    ("epochs=0", "must be >= 1"),
    ("chars=maybe", "expected true or false"),
    ("precision=fp8", "precision='fp8'"),
    ("compile=fast", "compile='fast': use auto, true or false"),
    ("export_formats=onnx,tflite", "tflite"),
    ("epochs", "key=value"),
])
def test_bad_settings_are_named(assignment, message):
    with pytest.raises(ConfigError, match=message):
        resolve("sentiment", [assignment])


def test_bad_files_and_recipes(tmp_path):
    with pytest.raises(ConfigError, match="unknown recipe 'poetry'"):
        resolve("poetry")
    missing = tmp_path / "none.yaml"
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(str(missing))
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochs: 3\n")
    with pytest.raises(ConfigError, match="which recipe"):
        resolve(str(bad))
    broken = tmp_path / "broken.yaml"
    broken.write_text("recipe: sentiment\nepochs: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        resolve(str(broken))


@pytest.mark.parametrize(("assignments", "message"), [
    (["lr=nan"], r"^lr: expected a finite number, got 'nan'\.$"),
    (["l2=nan"], r"^l2: expected a finite number, got 'nan'\.$"),
    (["lr=inf"], r"^lr: expected a finite number"),
    (["clip_grad_norm=-inf"], r"^clip_grad_norm: expected a finite number"),
    (["epochs=1e400"], r"^epochs: expected a finite number"),
    (["epochs=2.5"], r"^epochs: expected an integer"),
    (["subset=10"], r"^subset=10: use 0 \(all rows\) or >= 200 \("),
    (["subset=-1"], r"^subset=-1: use 0"),
    (["epochs=0"], r"^epochs=0: must be >= 1\.$"),
    (["batch_size=0"], r"^batch_size=0: must be >= 1\.$"),
    (["lr=0"], r"^lr=0\.0: must be > 0\.$"),
    (["l2=-0.1"], r"^l2=-0\.1: must be >= 0\.$"),
    (["max_length=0"], r"^max_length=0: must be >= 1\.$"),
    (["max_vocab=2"], r"^max_vocab=2: must be >= 3\.$"),  # <pad>, <unk> and one word
    (["export_formats="], r"^export_formats=\[\]: choose one or more"),
    (["verify_rounds=4"], r"^verify_rounds=4: must be >= 5\.$"),  # the fewest the deploy choice trusts
    (["epochs=0", "lr=-1"], r"^epochs=0: must be >= 1; lr=-1\.0: must be > 0\.$"),
])
def test_every_bad_value_is_refused_naming_only_itself(assignments, message):
    with pytest.raises(ConfigError, match=message):
        resolve("sentiment", assignments)


def test_compile_is_a_recipe_setting_read_from_yaml_and_set_as_the_trainer_takes_it(tmp_path):
    from torchwork.recipes.config import compile_choice

    path = tmp_path / "exp.yaml"
    for recipe in ("sentiment", "fashion"):
        assert compile_choice(resolve(recipe)[1].compile) is False  # eager unless asked: compiling loses here
        for written, meant in (("true", True), ("auto", "auto"), ("off", False)):
            path.write_text(f"recipe: {recipe}\ncompile: {written}\n")
            assert compile_choice(resolve(str(path))[1].compile) == meant
    with pytest.raises(ConfigError, match="compile='1.5'"):
        resolve("fashion", ["compile=1.5"])


def test_yaml_overflow_and_booleans_are_config_errors(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("recipe: sentiment\nepochs: 1.0e+400\n")
    with pytest.raises(ConfigError, match=r"^epochs: expected a finite number, got inf\.$"):
        resolve(str(path))
    path.write_text("recipe: sentiment\nepochs: yes\n")
    with pytest.raises(ConfigError, match=r"^epochs: expected int, got True\.$"):
        resolve(str(path))
    path.write_text("recipe: fashion\nsubset: 50\n")
    with pytest.raises(ConfigError, match=r"^subset=50: use 0 \(all rows\) or >= 100"):
        resolve(str(path))
    path.write_text("recipe: sentiment\nepochs: 12345678901234567891\nsubset: 1e3\n")
    with pytest.raises(ConfigError, match=r"^epochs: 12345678901234567891 is too large for an integer setting"):
        resolve(str(path))  # past 64 bits: no tensor holds it (and every count has a smaller cap)
    path.write_text("recipe: sentiment\nepochs: 2.0\nsubset: 1e3\n")
    assert resolve(str(path))[1].epochs == 2 and resolve(str(path))[1].subset == 1000


@pytest.mark.parametrize(("key", "meant"), [("learning_rate", "lr"), ("weight_decay", "l2"),
                                            ("num_epochs", "epochs"), ("batch-size", "batch_size"),
                                            ("max_len", "max_length"), ("pateince", "patience")])
def test_unknown_settings_suggest_what_they_likely_mean(key, meant):
    with pytest.raises(ConfigError, match=f"unknown setting '{key}'.*Did you mean '{meant}'"):
        resolve("sentiment", [f"{key}=1"])


def test_a_directory_given_as_config_says_it_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        resolve(str(tmp_path))
    (tmp_path / "exp.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"exp\.yaml is a directory"):
        resolve(str(tmp_path / "exp.yaml"))


def test_misspelt_commands_and_recipes_get_a_suggestion(capsys):
    from torchwork.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["trian", "sentiment"])
    assert exited.value.code == 2
    assert "Did you mean 'train'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["data", "describ", "tweets"])
    assert "Did you mean 'describe'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "sentiment", "--sett", "epochs=1"])
    err = capsys.readouterr().err
    assert "torchwork train: error: unrecognized arguments: --sett epochs=1" in err and "did you mean '--set'?" in err
    assert main(["train", "sentimnet"]) == 2
    assert "Did you mean 'sentiment'?" in capsys.readouterr().err


def test_a_resumed_run_s_records_are_read_as_checked_data(tmp_path, monkeypatch, capsys):
    import dataclasses
    import json

    from torchwork.recipes.sentiment import SentimentConfig, recorded_choices

    config, classes = SentimentConfig(), ["negative", "neutral", "positive"]
    baseline = {"accuracy": 0.75, "macro_f1": 0.73, "weighted_f1": 0.74,
                "per_class": {c: {"f1": 0.7} for c in classes}}
    settings = json.loads(json.dumps(dataclasses.asdict(config)))

    def record(**extra):
        (tmp_path / "manifest.json").write_text(json.dumps({"config": {**settings, **extra}}))

    assert recorded_choices(config, classes) is None  # not resuming
    monkeypatch.setenv("TORCHWORK_RESUME", str(tmp_path))
    record(baseline=baseline, precision_chosen="bf16", precision_timing={"step_ms_32": 2.0})
    assert recorded_choices(config, classes) == {"baseline": baseline, "precision_chosen": "bf16",
                                                 "precision_timing": {"step_ms_32": 2.0}}
    assert recorded_choices(dataclasses.replace(config, epochs=3), classes) is None  # other settings
    assert "recorded with other settings (epochs)" in capsys.readouterr().err
    for bad in ({"baseline": {**baseline, "macro_f1": "__import__('os')"}, "precision_chosen": "32"},
                {"baseline": baseline, "precision_chosen": "fp8"}, {"precision_chosen": "32"}):
        record(**bad)
        assert recorded_choices(config, classes) is None
    (tmp_path / "manifest.json").write_text("not json")
    assert recorded_choices(config, classes) is None
    assert "measuring again" in capsys.readouterr().err


def test_a_resumed_runs_manifest_or_decisions_that_is_a_fifo_or_leads_out_is_measured_again(tmp_path, monkeypatch,
                                                                                              capsys):
    import json
    import os

    from torchwork.recipes.recorded import Decisions, recorded_config

    run, outside = tmp_path / "run", tmp_path / "outside.json"
    run.mkdir()
    outside.write_text(json.dumps({"config": {"epochs": 3}, "strategy": {"chosen": "full"}}))
    monkeypatch.setenv("TORCHWORK_RESUME", str(run))
    for name in ("manifest.json", "decisions.json"):
        os.mkfifo(run / name)  # read as before, either would block the resumed run for ever
    assert returns_within(10, lambda: recorded_config({"epochs": 3}), run / "manifest.json") is None
    assert returns_within(10, lambda: Decisions(run).get("strategy"), run / "decisions.json") is None
    assert capsys.readouterr().err.count("is a FIFO, not a regular file") == 2
    for name in ("manifest.json", "decisions.json"):
        (run / name).unlink()
        (run / name).symlink_to(outside)  # another file's settings are not what this run recorded
    assert recorded_config({"epochs": 3}) is None and Decisions(run).get("strategy") is None
    assert capsys.readouterr().err.count("leading out of its run folder") == 2
    (run / "decisions.json").unlink()
    with (run / "decisions.json").open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: refused unread, over the 16 MiB
    assert Decisions(run).get("strategy") is None and "is over 16 MiB" in capsys.readouterr().err
    Decisions(run).record("strategy", {"chosen": "top"})  # a decision made again replaces what was refused
    assert Decisions(run).get("strategy") == {"chosen": "top"}


@pytest.mark.parametrize(("argv", "message"), [(["--epochs", "0"], "epochs=0: must be >= 1."),
                                               (["--seed", "-1"], "seed=-1: must be >= 0.")])
def test_digits_refuses_bad_settings_before_any_work(argv, message, capsys, monkeypatch):
    from torchwork.cli import main

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads

    assert main(["digits", *argv]) == 2
    err = capsys.readouterr()
    assert f"torchwork: error: {message}" in err.err and err.out == "" and "deprecated" not in err.err


def test_demo_is_the_old_name_of_digits(capsys, monkeypatch):
    from torchwork.cli import main

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads

    assert main(["demo", "--epochs", "0"]) == 2  # the same command, refusing the same bad setting
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("torchwork: 'torchwork demo' is deprecated: write 'torchwork digits' instead (the same "
                      "command; the old name goes in 0.3.0).")
    assert err[1] == "torchwork: error: epochs=0: must be >= 1."


def test_the_quickstart_runs_the_transformer_unless_told_otherwise():
    from torchwork.recipes.registry import quickstart_config

    assert quickstart_config("sentiment")[1].model == "transformer"
    assert resolve("sentiment")[1].model == "ngram"  # torchwork train keeps the recipe's fast default
    _, quick = quickstart_config("sentiment", quick=True)
    assert (quick.model, quick.subset, quick.transformer_epochs) == ("transformer", 1000, 2)
    _, ngram = quickstart_config("sentiment", ["model=ngram"], quick=True)
    assert (ngram.model, ngram.subset, ngram.transformer_epochs) == ("ngram", 3000, 4)
    _, mine = quickstart_config("sentiment", ["subset=500"], quick=True)
    assert (mine.model, mine.subset) == ("transformer", 500)  # the user's settings win
    assert quickstart_config("fashion")[0] == "fashion"


# ------------------------------------------------------------------ the config file is read as data
# nine levels of nine aliases: 9^9 (387 million) strings once expanded, from about 340 bytes of YAML
ALIAS_BOMB = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def _one_line_error(path, *words: str) -> str:
    """The ConfigError of resolving ``path``: one short line holding each of ``words``."""
    with pytest.raises(ConfigError) as caught:
        resolve(str(path))
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message[:1000]
    for word in words:
        assert word in message, message
    return message


def _raised_in_a_thread(call, seconds: float = 20.0) -> BaseException | None:
    """What ``call()`` raised, run in a daemon thread: a call that blocks (on opening a FIFO) fails the test
    after ``seconds`` instead of hanging pytest."""
    import threading

    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            raised.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call blocked for {seconds:g} s"
    return raised[0]


def test_a_fifo_given_as_config_is_refused_as_a_fifo(tmp_path):
    import os

    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)
    try:
        error = _raised_in_a_thread(lambda: resolve(str(fifo)))
    finally:  # a reader blocked on the FIFO is let go by a writer opening it
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # no reader waiting: nothing to release
    assert isinstance(error, ConfigError), error
    assert str(error) == f"config file {fifo} is not a regular file (a FIFO); give a YAML file."


def test_a_sparse_gigabyte_config_is_refused_unread(tmp_path, within):
    path = tmp_path / "exp.yaml"
    with open(path, "wb") as handle:
        handle.truncate(1 << 30)  # a hole: takes no disk, reads as a gigabyte of zeros
    with within(10):
        _one_line_error(path, f"config file {path} is over 1 MiB, the limit for a config file")


def test_a_billion_laughs_config_is_refused_in_one_short_line(tmp_path, within):
    path = tmp_path / "exp.yaml"
    path.write_text("recipe: sentiment\n" + ALIAS_BOMB)
    with within(30):
        _one_line_error(path, f"config file {path}, line 3: aliases (*a) are not supported in a config file",
                        "expand to billions", "write the values out")


@pytest.mark.parametrize(("text", "words"), [
    ("recipe: sentiment\nepochs: [1,\n", ("is not valid YAML: line 3, column 1:", "Fix that line")),
    ("recipe: sentiment\n\tepochs: 3\n", ("is not valid YAML: line 2, column 1: found character '\\t'",)),
    ("recipe: sentiment\nepochs: " + "[" * 10_000 + "]" * 10_000 + "\n", ("line 2: lists and mappings nested more",)),
    ("recipe: sentiment\nepochs: " + "9" * 5000 + "\n", ("holds a value YAML cannot convert", "quote it")),
    (b"recipe: sentiment\nepochs: \xff\n", ("is not UTF-8 text (its byte 27 is not)",)),
])
def test_a_config_that_is_not_yaml_data_is_refused_in_one_line(tmp_path, text, words):
    path = tmp_path / "exp.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    _one_line_error(path, f"config file {path}", *words)
