"""`torchwork fit --time-budget`: the budget read (and refused before any work), the plan's decisions on a
clock the test moves by hand, and one real budgeted run of real movie reviews whose summary and report hold
the plan, its trials and the tuned model against the default settings'."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from torchwork.cli import main
from torchwork.errors import ConfigError
from torchwork.recipes.fit_budget import (
    AIM,
    VERIFY_ROUND_S,
    BudgetPlan,
    budget_space,
    final_stages_seconds,
    parse_budget,
    tuned_against_default,
)
from torchwork.recipes.sentiment import SentimentConfig


def _reviews(path: Path, count: int) -> Path:
    """``count`` real Rotten Tomatoes reviews (cleaned by torchwork.data) as a CSV file of text and label."""
    import csv

    from torchwork.data import load_dataset

    splits = load_dataset("rotten_tomatoes", seed=0)
    train = splits.train
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows([text, splits.classes[label]] for text, label in zip(train.texts[:count], train.labels))
    return path

SMALL = ["--quick", "--set", "subset=200", "--set", "epochs=3", "--set", "verify_rounds=5", "--set",
         "export_formats=onnx", "--set", "quantize=false", "--set", "threads=1"]


@pytest.mark.parametrize(("text", "seconds"), [("900", 900.0), ("900s", 900.0), ("15m", 900.0), ("15min", 900.0),
                                               ("1.5h", 5400.0), (" 2.5 S ", 2.5), (".5m", 30.0),
                                               ("1h30m", 5400.0), ("2m 30s", 150.0), ("1H 2min 3sec", 3723.0)])
def test_a_budget_reads_in_seconds_minutes_or_hours(text, seconds) -> None:
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "-5", "-5m", "nan", "NaN", "inf", "-inf", "", "15x", "m", "1e3",
                                  "15 m 3", "1,5h", "200h", "1h30", "30s1m", "0h0m", "168h1s", "h m"])
def test_a_budget_that_cannot_work_is_one_clear_error(text) -> None:
    with pytest.raises(ConfigError) as error:
        parse_budget(text)
    message = str(error.value)
    assert message.startswith(f"--time-budget {text!r}") and "15m" in message and "\n" not in message


@pytest.mark.parametrize("budget", ["0", "nan", "-1m", "soon"])
def test_a_bad_budget_fails_before_any_work(tmp_path, capsys, budget) -> None:
    data = _reviews(tmp_path / "reviews.csv", 300)
    runs = tmp_path / "runs"
    code = main(["fit", str(data), *SMALL, "--set", f"run_dir={runs}", f"--time-budget={budget}"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and "--time-budget" in captured.err
    assert captured.out == "" and not runs.exists()  # nothing read, nothing written


def test_the_encoders_space_holds_its_settings_and_its_stages_grow_with_the_rows() -> None:
    from torchwork.recipes.transformer_settings import TransformerSettings
    from torchwork.tune.budget_transformer import final_stages_seconds as encoder_stages
    from torchwork.tune.budget_transformer import transformer_space

    settings = TransformerSettings.of(SentimentConfig(transformer_lr=2e-4, transformer_epochs=4,
                                                      transformer_max_length=40))
    space = transformer_space(settings)
    assert space["lr"]["low"] < 2e-4 < space["lr"]["high"] and space["lr"]["log"]
    assert space["epochs"] == {"low": 2, "high": 8} and space["max_length"] == {"choices": [20, 30, 40]}
    assert encoder_stages(6000) - encoder_stages(0) == pytest.approx(48.0)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


DEFAULTS = {"epochs": 10, "lr": 0.03, "max_length": 64}


def _measured_plan(budget: float = 100.0, final_s: float = 20.0) -> tuple[BudgetPlan, Clock]:
    """A plan whose first stages took 10 s and whose default trial took 12 s (2 s fixed, 1 s an epoch)."""
    clock = Clock()
    plan = BudgetPlan(budget, clock=clock, final_s=final_s)
    clock.now += 10
    plan.start_tuning()
    assert plan.may_start(DEFAULTS)[0]  # nothing measured: the defaults start, whatever the clock says
    clock.now += 12
    plan.learn(DEFAULTS, seconds=12, training_seconds=10, epochs_run=10)
    plan.best = DEFAULTS
    return plan, clock


def test_the_plan_learns_a_trials_cost_from_the_first() -> None:
    plan, _ = _measured_plan()
    assert plan.stages == {"data report and baselines": 10}
    assert plan.estimate(DEFAULTS) == pytest.approx(12)
    assert plan.estimate({**DEFAULTS, "epochs": 20}) == pytest.approx(22)
    assert plan.estimate({**DEFAULTS, "max_length": 128}) == pytest.approx(22)  # twice the tokens an epoch
    assert plan.estimate({**DEFAULTS, "max_length": 32}) == pytest.approx(12)  # never planned cheaper
    plan.learn({**DEFAULTS, "epochs": 4}, seconds=11, training_seconds=8, epochs_run=4)  # a slow moment
    assert plan.cost.overhead_s == 3 and plan.cost.epoch_s == 2  # the slowest rate seen is kept


def test_a_trial_starts_only_if_it_and_the_final_stages_fit() -> None:
    plan, clock = _measured_plan()  # at 22 s of 100; aims at 95 s; the final: 12 s training + 20 s
    assert plan.may_start(DEFAULTS)[0]  # ends at 34 s, before 95 - 12 - 20 = 63 s
    clock.now += 29  # 51 s: ends at 63 s, just in
    assert plan.may_start(DEFAULTS)[0]
    go, why = plan.may_start({**DEFAULTS, "epochs": 11})  # 13 s: ends at 64 s, and its final would be 13 s
    assert not go and "not started" in why and "62.0 s" in why
    clock.now += 0.5
    assert not plan.may_start(DEFAULTS)[0]


def test_a_longer_best_trial_reserves_more_for_the_final_training() -> None:
    plan, clock = _measured_plan()
    clock.now += 25  # 47 s
    assert plan.may_start(DEFAULTS)[0]
    plan.best = {**DEFAULTS, "epochs": 20}  # the best so far trains 22 s: its final training needs that
    assert plan.final_training() == pytest.approx(22)
    assert not plan.may_start(DEFAULTS)[0]  # 47 + 12 = 59 > 95 - 22 - 20 = 53


def test_a_running_trial_is_stopped_when_its_next_epoch_would_not_fit() -> None:
    plan, clock = _measured_plan()
    long = {**DEFAULTS, "epochs": 30}
    clock.now = plan.started + 61.5  # the next epoch (1 s) ends at 62.5 s, before 95 - 12 - 20 = 63 s
    assert not plan.should_stop(long, epoch=5)
    clock.now = plan.started + 62.5
    assert plan.should_stop(long, epoch=5)
    assert not plan.should_stop(long, epoch=29)  # its last epoch is trained: stopping saves nothing
    plan.best = None
    assert not plan.should_stop(long, epoch=5)  # the default trial (no best yet) always runs whole


def test_a_served_best_trial_reserves_no_final_training() -> None:
    plan, clock = _measured_plan()
    plan.reuse_best = True
    plan.best = {"epochs": 8, "max_length": 64}
    assert plan.final_training({"epochs": 16, "max_length": 128}) == 0.0
    clock.now += 60  # at 82 s a 10 s trial ends after 75 s, the last moment that leaves the 20 s of stages after it
    go, why = plan.may_start({"epochs": 8, "max_length": 64})
    assert not go and "final training" not in why and "the stages after it (about 20.0 s)" in why


def test_the_verification_rounds_shrink_to_what_the_budget_left_holds() -> None:
    config = SentimentConfig(verify_rounds=20, export_formats=("onnx",))
    full, least = final_stages_seconds(config), final_stages_seconds(config, 5)
    assert full - least == pytest.approx(15 * VERIFY_ROUND_S)
    plan, clock = _measured_plan(budget=300)
    assert plan.verify_rounds(config) == 20
    clock.now = plan.started + AIM * 300 - 12 - full + 4 * VERIFY_ROUND_S  # 4 rounds' time short: 4 rounds fewer
    assert plan.verify_rounds(config) == 16
    clock.now = plan.started + AIM * 300  # no time left at all: the fewest rounds the deploy choice trusts
    assert plan.verify_rounds(config) == 5


def test_without_a_tuner_the_plan_keeps_the_defaults(capsys) -> None:
    clock = Clock()
    plan = BudgetPlan(600, clock=clock)
    clock.now += 3
    config = SentimentConfig(epochs=6)
    tuned = plan.tune(config, None, None, None, ["a", "b"])
    assert (tuned.epochs, tuned.lr, tuned.max_length, tuned.precision) == (6, config.lr, 64, "32")
    assert plan.stages["data report and baselines"] == 3 and plan.decisions


def test_the_space_holds_the_defaults() -> None:
    config = SentimentConfig()
    space = budget_space(config)
    assert space["lr"]["low"] < config.lr < space["lr"]["high"] and space["lr"]["log"]
    assert space["epochs"]["low"] <= config.epochs <= space["epochs"]["high"]
    assert config.max_length in space["max_length"]["choices"]


def test_tuned_against_default_says_when_tuning_won_beyond_the_noise() -> None:
    labels = [0, 1, 2] * 100
    tuned = [[1.0 if j == y else 0.0 for j in range(3)] for y in labels]  # right on every row
    default = [y if i % 3 else (y + 1) % 3 for i, y in enumerate(labels)]  # wrong on a third
    won = tuned_against_default(tuned, default, labels, ["a", "b", "c"], seed=0)
    assert won["verdict"] == "tuned beats the defaults beyond the noise" and won["difference"]["low"] > 0
    lost = tuned_against_default([[row[(k + 1) % 3] for k in range(3)] for row in tuned], labels, labels,
                                 ["a", "b", "c"], seed=0)
    assert lost["verdict"] == "the defaults beat the tuned settings beyond the noise"
    assert "95% interval" in won["reason"]


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("budget")
    data = _reviews(folder / "reviews.csv", 900)
    assert main(["fit", str(data), *SMALL, "--set", f"run_dir={folder / 'runs'}", "--time-budget", "40s"]) == 0
    (run,) = [r for r in (folder / "runs").iterdir() if r.name != "tune"]
    return run


def test_a_budgeted_run_records_its_plan_and_trials(budgeted) -> None:
    plan = json.loads((budgeted / "summary.json").read_text())["time_budget"]
    assert plan["budget_s"] == 40 and plan["aim_s"] == 38 and isinstance(plan["within_budget"], bool)
    assert set(plan["stages"]) == {"data report and baselines", "tuning"}
    # the export and verification alone are planned longer than 40 s: the run says the budget is too small
    assert any(d.startswith("the budget is too small for this data") for d in plan["decisions"])
    assert plan["trial_cost"]["epoch_s"] > 0 and plan["final_stages_estimate_s"] > 0
    first, *others = plan["trials"]
    assert first["trial"] == 0 and first["state"] == "COMPLETE" and first["params"] == {
        "epochs": 3, "lr": 0.03, "max_length": 64}
    for trial in others:  # each later trial started because the plan said it fit, or was refused and ended it
        assert trial["why"].startswith("started" if trial["state"] != "NOT STARTED" else "not started")
    assert [t["state"] for t in plan["trials"]].count("NOT STARTED") <= 1
    best = max((t for t in plan["trials"] if t["state"] == "COMPLETE"), key=lambda t: t["value"])
    assert plan["best_params"] == best["params"]
    study = Path(plan["study"])
    assert json.loads((study / "trials" / "0" / "trial.json").read_text())["state"] == "COMPLETE"


def test_a_budgeted_run_reports_tuned_against_default(budgeted) -> None:
    summary = json.loads((budgeted / "summary.json").read_text())
    against = summary["time_budget"]["tuned_against_default"]
    difference = against["difference"]
    assert difference["low"] <= difference["value"] <= difference["high"]
    assert math.isclose(against["a"]["macro_f1"], summary["test"]["macro_f1"], abs_tol=1e-6)
    assert (against["verdict"] == "within the noise") == (difference["low"] <= 0 <= difference["high"])
    html = (budgeted / "report.html").read_text()
    assert "Tuning inside the time budget" in html and against["verdict"] in html
    manifest = json.loads((budgeted / "manifest.json").read_text())
    assert {k: manifest["config"][k] for k in best_keys()} == summary["time_budget"]["best_params"]


def best_keys() -> list[str]:
    return ["epochs", "lr", "max_length"]
