"""The fine-tuned encoder's trials inside ``torchwork fit --time-budget`` (without ``--quick``).

The same plan as the n-gram model's (:class:`~torchwork.recipes.fit_budget.BudgetPlan`) and the same study
(:func:`torchwork.tune.budget.run_study`: ``<run>/tune/fit-budget-<time>/``, which ``torchwork tune show``
reads), over the encoder's learning rate, epochs and max length. Two differences, both because a trial of
the encoder costs minutes on a CPU where the n-gram model's costs seconds:

* the best trial's model *is* the served one: it is not trained again with the best settings (the plan
  reserves no time for a final training, only for the export, verification and report after it);
* trial 0 measures the training strategy and precision once (``decisions``); the later trials reuse them
  instead of timing them again.

The stages after training are estimated from this machine's 30k-tweet run (export, INT8 with its calibration
and fallback, verification on the whole test split: 58 s quiet for 3,000 validation and 3,000 test rows),
doubled for a shared machine: 45 s and 8 ms a validation or test row, plus the report and the exit.

    >>> from torchwork.recipes.sentiment import SentimentConfig
    >>> from torchwork.recipes.transformer_settings import TransformerSettings
    >>> space = transformer_space(TransformerSettings.of(SentimentConfig(transformer_max_length=64)))
    >>> space["epochs"], space["max_length"]
    ({'low': 2, 'high': 8}, {'choices': [32, 48, 64]})
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any

EXPORT_FIXED_S, EXPORT_ROW_S = 45.0, 0.008
BEFORE_TUNING = "data report, baselines and the n-gram model"


def transformer_space(settings: Any) -> dict[str, dict[str, Any]]:
    """What the budget tunes of the encoder (a ``torchwork tune`` space), each range holding the settings
    themselves (trial 0): the learning rate, the epochs and the max length (shorter is faster, and cuts more
    texts; longer than the 95th percentile chosen from the data would help few)."""
    lr, epochs, length = settings.transformer_lr, settings.transformer_epochs, settings.transformer_max_length
    return {"lr": {"low": lr / 3, "high": lr * 3, "log": True},
            "epochs": {"low": max(1, epochs // 2), "high": max(2, epochs * 2)},
            "max_length": {"choices": sorted({max(8, length // 2), max(8, 3 * length // 4), length})}}


def final_stages_seconds(rows: int) -> float:
    """The encoder's stages after its training, for ``rows`` validation and test rows (see above)."""
    from torchwork.recipes.fit_budget import EXIT_S, REPORT_S

    return EXPORT_FIXED_S + EXPORT_ROW_S * rows + REPORT_S + EXIT_S


class _TrialDecisions:
    """The run's decisions as a trial reads them: the same record, said as the first trial's measurement."""

    source = "measured by the budget's first trial"

    def __init__(self, decisions: Any) -> None:
        self.decisions = decisions

    def get(self, name: str) -> Any:
        return self.decisions.get(name)

    def record(self, name: str, value: Any) -> None:
        self.decisions.record(name, value)


class TransformerTrials:
    """The target of the study (the interface of :class:`torchwork.tune.budget.NgramTrials`): the encoder
    fine-tuned on the command's splits. Keeps the best complete trial's model and trial 0's test predictions."""

    objective = {"name": "val_macro_f1", "direction": "maximize",
                 "description": "the fine-tuned encoder's best validation macro-F1 (early stopping's checkpoint)"}
    integer_settings = frozenset({"epochs", "max_length"})

    def __init__(self, plan: Any, settings: Any, splits: dict[str, Any], classes: list[str], run_path: Path,
                 decisions: Any) -> None:
        self.plan, self.settings, self.splits, self.classes = plan, settings, splits, classes
        self.decisions = _TrialDecisions(decisions) if decisions is not None else None
        self.training_seconds = 0.0
        self.default_predictions: list[int] | None = None
        self.best: tuple[float, int, Any, Any] | None = None  # (value, trial, TransformerResult, its settings)
        self.study_root, self.seed = Path(run_path) / "tune", settings.seed
        self.base = {"recipe": "sentiment", "config": "fit --time-budget (the fine-tuned encoder)",
                     "settings": [f"model_dir={settings.model_dir or 'MiniLM'}"]}

    def defaults(self, names: list[str]) -> dict[str, Any]:
        """Trial 0's params: the settings themselves (the max length chosen from the data)."""
        own = {"lr": self.settings.transformer_lr, "epochs": self.settings.transformer_epochs,
               "max_length": self.settings.transformer_max_length}
        return {name: own[name] for name in names}

    def settings_for(self, params: dict[str, Any]) -> Any:
        return dataclasses.replace(self.settings, transformer_lr=float(params["lr"]),
                                   transformer_epochs=int(params["epochs"]),
                                   transformer_max_length=int(params["max_length"]))

    def config_for(self, params: dict[str, Any], folder: str | Path, threads: int) -> Any:
        """What the pruning callback reads of a trial's config: its epochs."""
        return types.SimpleNamespace(epochs=int(params["epochs"]))

    def run(self, params: dict[str, Any], folder: Path, threads: int, callbacks: list[Any],
            record: dict[str, Any]) -> dict[str, Any]:
        from torchwork import seed_everything
        from torchwork.finetune.features import release_memory
        from torchwork.recipes.sentiment_transformer import train_transformer
        from torchwork.tune.budget import BudgetStop

        settings = self.settings_for(params)
        seed_everything(settings.seed)
        splits = self.splits
        result = train_transformer(settings, splits["train"], splits["validation"], splits["test"], self.classes,
                                   Path(folder), self.decisions, [*callbacks, BudgetStop(self.plan, params, callbacks[0])])
        self.training_seconds = result.training_seconds - result.cache_seconds  # the cache is the fixed part
        number = record["tune"]["trial"]
        if number == 0:
            self.default_predictions = [int(i) for i in result.test_probabilities.argmax(dim=-1).tolist()]
        value, history, precision = float(result.best["value"]), result.history, result.precision
        if callbacks[0].pruned_at is None and (self.best is None or value > self.best[0]):
            self.best = (value, number, result, settings)  # the one before is dropped: its memory goes back
        del result
        release_memory()
        return {"value": value, "history": history, "run_path": Path(folder), "precision": precision}


def tuned_transformer(plan: Any, settings: Any, train: Any, validation: Any, test: Any, classes: list[str],
                      run_path: Path, decisions: Any) -> tuple[Any, Any]:
    """The trials the budget holds; returns the best trial's result (its model, already trained) and
    settings, which the export uses as they are."""
    from torchwork.tune.budget import run_study

    plan.start_tuning(BEFORE_TUNING)
    plan.reuse_best = True
    plan.final_s = final_stages_seconds(len(validation) + len(test))
    target = TransformerTrials(plan, settings, {"train": train, "validation": validation, "test": test}, classes,
                               run_path, decisions)
    tuning = run_study(plan, target, transformer_space(settings))
    if target.best is None or target.best[1] != tuning["best_trial"]:  # one rule picks both: a bug if they differ
        raise RuntimeError(f"the study's best trial ({tuning['best_trial']}) is not the model kept "
                           f"({target.best[1] if target.best else None})")
    _, number, result, best_settings = target.best
    plan.tuning = {**tuning, "tuned_probabilities": result.test_probabilities.tolist()}
    plan.end_tuning("the default settings' trial and the stages after it end")
    plan.decisions.append(f"the served encoder is trial {number}'s model, not trained again")
    print(f"the encoder served: trial {number}'s model (lr {best_settings.transformer_lr:.3g}, "
          f"{best_settings.transformer_epochs} epochs, max_length {best_settings.transformer_max_length})", flush=True)
    return result, best_settings
