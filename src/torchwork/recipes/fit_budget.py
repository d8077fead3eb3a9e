"""``torchwork fit --time-budget 15m``: the budget read, and the plan that keeps the whole command inside it.

The plan's clock starts when the command starts. It times the first stages (the data report and the
baselines), learns a trial's cost from the trials it runs (the first is the default settings: it costs what
the untuned pipeline would have cost), starts a trial only if the trial, the final training with the best
settings so far and the stages after it (export, verification, report) all fit before the deadline, and
stops a running trial at the end of the epoch after which the next one would not fit. It aims at 95% of
the budget, so that an estimate 5% short still ends inside the issue's 10%.

The clock is injected, so the plan's decisions are data: a test gives it a clock it moves by hand.

Example:
    >>> parse_budget("15m"), parse_budget("900"), parse_budget("1.5h"), parse_budget(" 90s "), parse_budget("1h30m")
    (900.0, 900.0, 5400.0, 90.0, 5400.0)
    >>> now = [0.0]
    >>> plan = BudgetPlan(60, clock=lambda: now[0], final_s=10)
    >>> now[0] = 5.0  # the data report and the baselines took 5 s
    >>> plan.start_tuning()
    >>> plan.may_start({"epochs": 4, "max_length": 64})  # nothing measured yet: the defaults always start
    (True, 'the default settings: the first trial measures what a trial costs')
    >>> plan.learn({"epochs": 4, "max_length": 64}, seconds=5.0, training_seconds=4.0, epochs_run=4)
    >>> now[0] = 10.0
    >>> plan.may_start({"epochs": 8, "max_length": 64})[0]  # ends at 19 s; the last end: 57 - 9 - 10 = 38 s
    True
    >>> now[0] = 30.0
    >>> plan.may_start({"epochs": 8, "max_length": 64})
    (False, 'not started: it would take about 9.0 s and end at 39.0 s, after 38.0 s, the last moment that leaves the final training (about 9.0 s) and the stages after it (about 10.0 s) inside the budget (95% of 60.0 s)')
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.errors import ConfigError

UNITS = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_BUDGET = re.compile(rf"^\s*{_NUMBER}\s*(s|sec|m|min|h)?\s*$", re.IGNORECASE)
# 1h30m, 2m 30s: each part with its unit, hours before minutes before seconds (as people write a duration)
_COMPOUND = re.compile(rf"^\s*(?:{_NUMBER}\s*h\s*)?(?:{_NUMBER}\s*(?:m|min)\s*)?(?:{_NUMBER}\s*(?:s|sec)\s*)?$",
                       re.IGNORECASE)
MAX_BUDGET_S = 7 * 24 * 3600.0  # a week: a longer budget is a typo (15d for 15m), not a plan
AIM = 0.95  # the plan ends at this share of the budget: an estimate 5% short still ends inside +10%
# The n-gram pipeline after the final training, measured on this machine shared by eight sessions (2 cores, load
# 15, 2,000 reviews a split): export, ONNX and INT8 about 25 s, each verification round about 2.5 s (batch 1 and
# 64, every variant), evaluation, the bootstrap and the report about 5 s, and the process's end (the interpreter
# unloading torch and onnxruntime) about 8 s; a torch.export (pt2) variant adds about 8 s. A quiet machine takes
# a third of that: the plan then tunes less than it could, and never overshoots for it.
EXPORT_FIXED_S, VERIFY_ROUND_S, PT2_S, REPORT_S, EXIT_S = 25.0, 2.5, 8.0, 5.0, 8.0
MIN_VERIFY_ROUNDS = 5  # the fewest the deploy choice trusts (SentimentConfig.verify_rounds)


def parse_budget(text: str | float) -> float:
    """Seconds from ``900``, ``900s``, ``15m``, ``15min``, ``1.5h`` or ``1h30m``; a ConfigError for anything else (0,
    negative, NaN, inf, over a week, garbage), which says what to write instead."""
    seconds = math.nan
    if match := _BUDGET.match(str(text)):
        seconds = float(match.group(1)) * UNITS[(match.group(2) or "").lower()]
    elif (match := _COMPOUND.match(str(text))) and any(match.groups()):
        seconds = sum(float(part or 0) * unit for part, unit in zip(match.groups(), (3600.0, 60.0, 1.0)))
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_BUDGET_S):
        raise ConfigError(f"--time-budget {str(text)!r}: give a positive duration of at most a week, in seconds "
                          "(900 or 900s), minutes (15m), hours (1.5h) or both (1h30m).")
    return seconds


def process_age() -> float:
    """Seconds since this process started (Linux: /proc; elsewhere 0): the budget counts from the command's
    start, interpreter and imports included."""
    try:
        with open("/proc/self/stat", "rb") as stat, open("/proc/uptime", "rb") as uptime:
            ticks = int(stat.read(4096).rsplit(b")", 1)[1].split()[19])  # field 22, after the command's name
            return max(0.0, float(uptime.read(64).split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def command_age(argv: Sequence[str]) -> float:
    """What the budget has spent before the plan starts: this process's age when it is the ``torchwork``
    command (the console script or ``python -m torchwork.cli``), else 0 (a test, a notebook: a longer-lived
    process calling ``fit`` in it).

    >>> command_age(["/usr/bin/pytest", "-q"])
    0.0
    """
    first = str(argv[0]) if argv else ""
    return process_age() if os.path.basename(first) == "torchwork" or first.endswith(
        os.path.join("torchwork", "cli.py")) else 0.0


def final_stages_seconds(config: Any, verify_rounds: int | None = None) -> float:
    """The n-gram pipeline's stages after its final training (export, INT8, verification, report), estimated
    from the timings above; ``verify_rounds`` instead of the config's."""
    rounds = config.verify_rounds if verify_rounds is None else verify_rounds
    return (EXPORT_FIXED_S + VERIFY_ROUND_S * rounds + REPORT_S + EXIT_S
            + (PT2_S if "pt2" in tuple(config.export_formats) else 0.0))


def budget_space(config: Any) -> dict[str, dict[str, Any]]:
    """What ``fit --time-budget --quick`` tunes (a ``torchwork tune`` space): the n-gram model's learning rate,
    epochs and max length, each range holding the recipe's default (the first trial).

    >>> from torchwork.recipes.sentiment import SentimentConfig
    >>> budget_space(SentimentConfig(epochs=8))["epochs"]
    {'low': 4, 'high': 16}
    """
    return {"lr": {"low": config.lr / 10, "high": config.lr * 3, "log": True},
            "epochs": {"low": max(1, config.epochs // 2), "high": max(2, config.epochs * 2)},
            "max_length": {"choices": sorted({max(8, config.max_length // 2), config.max_length,
                                               config.max_length * 2})}}


def default_params(config: Any, space: dict[str, Any]) -> dict[str, Any]:
    return {name: getattr(config, name) for name in space}


@dataclasses.dataclass
class TrialCost:
    """What a trial costs: a fixed part (building the vocabulary, the model) and seconds per epoch at a
    max length; the most expensive rate seen is kept (the machine is shared: plan for its slow moments)."""

    overhead_s: float
    epoch_s: float
    max_length: int

    def epoch_seconds(self, params: dict[str, Any]) -> float:
        return self.epoch_s * max(1.0, params["max_length"] / self.max_length)

    def seconds(self, params: dict[str, Any]) -> float:
        return self.overhead_s + self.epoch_seconds(params) * params["epochs"]


class BudgetPlan:
    """The budget of one ``torchwork fit`` command (see the module docstring). ``final_s``: the seconds of the
    stages after the final training; ``trials``: the tuner (``tune.budget.study_trials``), a function of the
    plan, the config, the space and the splits that runs the trials; None: no tuning, only the plan.
    ``encoder_trials``: the same for the fine-tuned encoder (``tune.budget_transformer.tuned_transformer``),
    which returns the best trial's result and settings."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic, final_s: float = 0.0,
                 trials: Callable[..., dict[str, Any]] | None = None, spent_s: float = 0.0,
                 encoder_trials: Callable[..., Any] | None = None) -> None:
        self.budget_s, self.clock, self.final_s, self.trials = budget_s, clock, final_s, trials
        self.encoder_trials = encoder_trials  # the fine-tuned encoder's tuner (tune.budget_transformer)
        self.started = clock() - spent_s  # spent_s: what the command spent before the plan (see command_age)
        self.stages: dict[str, float] = {}
        self.decisions: list[str] = []
        self.cost: TrialCost | None = None
        self.best: dict[str, Any] | None = None  # the best complete trial's params so far
        self.tuning: dict[str, Any] = {}
        self.before_tuning = ""  # the stage recorded by start_tuning
        # True when the best trial's model is the one served (the transformer's trials): no final training
        self.reuse_best = False

    @property
    def aim(self) -> float:
        """The moment the plan aims to end at."""
        return self.started + AIM * self.budget_s

    def elapsed(self) -> float:
        return self.clock() - self.started

    def start_tuning(self, stage: str = "data report and baselines") -> None:
        """The stages before tuning are done: their time is recorded under ``stage``."""
        self.stages[stage] = round(self.elapsed(), 2)
        self.before_tuning = stage

    def end_tuning(self, untuned: str) -> None:
        """The trials are done: the tuning stage's time is recorded, and a budget too small for ``untuned``
        (what runs without tuning, with its verb: "the untuned pipeline alone ends") is said, with the budget
        that would do."""
        self.stages["tuning"] = round(self.elapsed() - self.stages[self.before_tuning], 2)
        expected = self.elapsed() + self.final_training() + self.final_s
        if expected > self.budget_s:
            self.decisions.append(f"the budget is too small for this data on this machine: {untuned} at about "
                                  f"{expected:.0f} s; give --time-budget {expected * 1.2:.0f}s or more to tune")
            print(f"torchwork: {self.decisions[-1]}", flush=True)

    def estimate(self, params: dict[str, Any]) -> float:
        return self.cost.seconds(params) if self.cost else math.inf

    def learn(self, params: dict[str, Any], seconds: float, training_seconds: float, epochs_run: int) -> None:
        """A finished trial's cost: the fixed part and the rate per epoch, the larger of old and new."""
        epochs = max(1, epochs_run)
        rate = training_seconds / epochs / max(1.0, params["max_length"] / (self.cost or _unit(params)).max_length)
        overhead = max(0.0, seconds - training_seconds)
        if self.cost is None:
            self.cost = TrialCost(overhead, rate, int(params["max_length"]))
        else:
            self.cost = TrialCost(max(self.cost.overhead_s, overhead), max(self.cost.epoch_s, rate),
                                  self.cost.max_length)

    def final_training(self, params: dict[str, Any] | None = None) -> float:
        """The final training's estimate: the best settings so far (or ``params``, should they win); 0 when the
        best trial's model is served as it is."""
        if self.reuse_best:
            return 0.0
        candidates = [p for p in (self.best, params) if p is not None]
        return max((self.estimate(p) for p in candidates), default=0.0)

    def last_start(self, params: dict[str, Any]) -> float:
        """The latest moment a trial of ``params`` may end and still leave the final stages their time."""
        return self.aim - self.final_training(params) - self.final_s

    def may_start(self, params: dict[str, Any]) -> tuple[bool, str]:
        """Whether a trial of ``params`` starts now, and why (the default settings always do: they measure)."""
        if self.cost is None:
            return True, "the default settings: the first trial measures what a trial costs"
        now, need = self.clock() - self.started, self.estimate(params)
        last = self.last_start(params) - self.started
        if now + need <= last:
            return True, f"started: about {need:.1f} s, ends by {now + need:.1f} s of {last:.1f} s"
        final = "" if self.reuse_best else f"the final training (about {self.final_training(params):.1f} s) and "
        return False, (f"not started: it would take about {need:.1f} s and end at {now + need:.1f} s, after "
                       f"{last:.1f} s, the last moment that leaves {final}the stages after it (about "
                       f"{self.final_s:.1f} s) inside the budget ({100 * AIM:.0f}% of {self.budget_s:.1f} s)")

    def should_stop(self, params: dict[str, Any], epoch: int) -> bool:
        """At the end of epoch ``epoch`` (0-based) of a running trial: stop it when its next epoch would end
        after the moment that leaves the best settings' final training and the last stages their time (a
        stopped trial is pruned, never chosen, so only the best so far needs that time)."""
        if self.cost is None or self.best is None or epoch + 1 >= params["epochs"]:
            return False  # the default settings run whole (they are the fallback); a last epoch is done
        return self.clock() + self.cost.epoch_seconds(params) > self.aim - self.final_training() - self.final_s

    def verify_rounds(self, config: Any) -> int:
        """The config's verification rounds, or fewer (down to 5) when the budget left after the final
        training cannot hold them."""
        left = self.aim - self.clock() - self.final_training()
        rounds = config.verify_rounds
        while rounds > MIN_VERIFY_ROUNDS and final_stages_seconds(config, rounds) > left:
            rounds -= 1
        return rounds

    def tune(self, config: Any, train: Any, validation: Any, test: Any, classes: Sequence[str]) -> Any:
        """Run the trials that fit, then the config of the final training: the best settings, and the
        verification rounds that fit. Called by the recipe after its baselines."""
        from torchwork.recipes.config import apply_overrides

        self.start_tuning()
        self.final_s = final_stages_seconds(config)
        space = budget_space(config)
        if self.trials is None:
            self.decisions.append("no tuner was given: the default settings, planned only")
            self.tuning = {"trials": [], "best_params": default_params(config, space)}
        else:
            self.tuning = self.trials(self, config, space, train, validation, test, list(classes))
        best = self.tuning["best_params"]
        self.end_tuning("the untuned pipeline alone ends")
        rounds = self.verify_rounds(apply_overrides(config, best))
        if rounds < config.verify_rounds:
            self.decisions.append(f"verification: {rounds} timing rounds instead of {config.verify_rounds}, "
                                  "what the budget left holds")
        from torchwork import seed_everything

        seed_everything(config.seed)  # the final training starts where the trials started: it repeats the best
        return apply_overrides(config, {**best, "verify_rounds": rounds, "precision": "32"})  # as trials trained

    def finish(self, tuned_probabilities: Any, labels: Sequence[int], classes: Sequence[str], seed: int,
               say: Callable[[str], Any] = print) -> dict[str, Any]:
        """``summary.json``'s ``time_budget``: the plan, its trials and the tuned model against the default
        settings' on the test split (a paired bootstrap interval); printed in one line. The tuned model's
        probabilities are the tuner's own when it kept them (the served model may be another: the baseline)."""
        tuned_probabilities = self.tuning.pop("tuned_probabilities", tuned_probabilities)
        record: dict[str, Any] = {
            "budget_s": self.budget_s, "aim_s": round(AIM * self.budget_s, 2),
            "elapsed_s": round(self.elapsed(), 2), "stages": dict(self.stages),
            "trial_cost": dataclasses.asdict(self.cost) if self.cost else None,
            "final_stages_estimate_s": round(self.final_s, 2), "decisions": list(self.decisions),
            **{k: v for k, v in self.tuning.items() if k != "default_predictions"}}
        record["within_budget"] = record["elapsed_s"] <= self.budget_s
        default = self.tuning.get("default_predictions")
        if default is not None:
            record["tuned_against_default"] = tuned_against_default(tuned_probabilities, default, labels, classes,
                                                                    seed)
            say(record["tuned_against_default"]["reason"])
        return record


def _unit(params: dict[str, Any]) -> TrialCost:
    return TrialCost(0.0, 0.0, int(params["max_length"]))


def tuned_against_default(tuned_probabilities: Any, default_predictions: Any, labels: Sequence[int],
                          classes: Sequence[str], seed: int) -> dict[str, Any]:
    """The tuned model's test macro-F1 against the default settings' model, with the 95% paired-bootstrap
    interval of the difference and a verdict (``within the noise`` when the interval holds 0).

    >>> labels = [0, 1] * 100
    >>> tuned = [[0.9, 0.1], [0.1, 0.9]] * 100
    >>> tuned_against_default(tuned, [0, 1] * 100, labels, ["a", "b"], 0)["verdict"]
    'within the noise'
    """
    from torchwork.recipes.fit_choice import against_baseline

    comparison = against_baseline(tuned_probabilities, default_predictions, labels, classes, seed)
    difference = comparison["difference"]
    verdict = ("tuned beats the defaults beyond the noise" if comparison["beats"] else
               "the defaults beat the tuned settings beyond the noise" if difference["high"] < 0 else
               "within the noise")
    comparison["verdict"] = verdict
    comparison["reason"] = (f"tuned against default: test macro-F1 {comparison['a']['macro_f1']:.4f} against "
                            f"{comparison['b']['macro_f1']:.4f}: {difference['value']:+.4f} (95% interval "
                            f"{difference['low']:+.4f} to {difference['high']:+.4f}): {verdict}")
    return comparison


def budget_section(report: Any, record: dict[str, Any]) -> None:
    """The report's section on the time budget: the verdict, the stages and the trials."""
    report.heading("Tuning inside the time budget")
    against = record.get("tuned_against_default")
    if against:
        report.paragraph(against["reason"] + ".", "good" if against["difference"]["low"] > 0 else "note")
    report.paragraph(f"Budget {record['budget_s']:.0f} s (planned to end by {record['aim_s']:.0f} s); "
                     f"{record['elapsed_s']:.1f} s when the summary was written. "
                     + " ".join(f"{d}." for d in record.get("decisions", [])), "note")
    report.table("Stages (s)", ["stage", "seconds"], [[k, v] for k, v in record["stages"].items()])
    rows = [[t["trial"], t["state"], t.get("value"), t.get("seconds"), t.get("epochs"),
             ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t["params"].items()),
             t.get("why", "")] for t in record.get("trials", [])]
    report.table("Trials (validation macro-F1)", ["trial", "state", "value", "seconds", "epochs", "params", "why"],
                 rows)
