"""The trials of ``torchwork fit --time-budget``: a study of the tune package, run in this process on the splits
the command already holds, each trial started and stopped by the budget's plan
(:class:`~torchwork.recipes.fit_budget.BudgetPlan`).

It is a ``torchwork tune`` study (``<run_dir>/tune/fit-budget-<time>/``: ``study.db``, ``trials/<n>/`` with
``trial.json`` and the trial's run folder, so ``torchwork tune show`` reads it), with three differences that
the budget asks for: the trials run in this process (a worker process would read and audit the data again:
seconds of the budget per start); trial 0 is the recipe's default settings, not a point of the space (it
measures what a trial costs, and its test predictions are what the tuned model is compared with); and the
queue is not fixed: each next trial is queued only when the plan says it fits.

The command line (:func:`torchwork.recipes.cli.cli_fit`) reads ``--time-budget`` before any work and hands
:func:`study_trials` to the plan. What a trial is scored on:

    >>> NgramTrials.objective["name"], NgramTrials.objective["direction"]
    ('val_macro_f1', 'maximize')
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any

from torchwork.engine.callbacks import Callback
from torchwork.errors import ConfigError
from torchwork.runs.best_record import read_best_record

MAX_TRIALS = 200  # a bound on the queue, far above what a budget holds on a CPU


class BudgetStop(Callback):
    """Stops a running trial at an epoch's end when the plan says its next epoch would not fit; the trial is
    then pruned (``pruning.pruned_at`` set, which the tune package reads)."""

    def __init__(self, plan: Any, params: dict[str, Any], pruning: Any) -> None:
        self.plan, self.params, self.pruning = plan, params, pruning

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        epoch = int(logs["epoch"]) - 1
        if not trainer.should_stop and self.plan.should_stop(self.params, epoch):
            trainer.should_stop = True
            self.pruning.pruned_at = epoch
            self.plan.decisions.append(f"a trial was stopped after epoch {epoch + 1}: the next would not fit")


class NgramTrials:
    """The target of the study (the interface of ``tune.target.RecipeTarget``): the n-gram model trained on
    the command's own splits. Trial 0's test predictions are kept for the tuned-against-default comparison."""

    objective = {"name": "val_macro_f1", "direction": "maximize",
                 "description": "the n-gram model's best validation macro-F1 (early stopping's checkpoint)"}

    integer_settings = frozenset({"epochs", "max_length"})

    def __init__(self, plan: Any, config: Any, splits: dict[str, Any], classes: list[str]) -> None:
        self.plan, self.config, self.splits, self.classes = plan, config, splits, classes
        self.training_seconds = 0.0
        self.default_predictions: list[int] | None = None
        self.study_root, self.seed = Path(config.run_dir) / "tune", config.seed
        self.base = {"recipe": "sentiment", "config": "fit --time-budget", "settings": [f"data={config.data}"]}

    def defaults(self, names: list[str]) -> dict[str, Any]:
        """Trial 0's params: the recipe's own settings."""
        return {name: getattr(self.config, name) for name in names}

    def config_for(self, params: dict[str, Any], folder: str | Path, threads: int) -> Any:
        from torchwork.recipes.config import apply_overrides

        # fp32, as tune's trials train ("auto" times it, and the load sways the timing); the final training too
        return apply_overrides(self.config, {**params, "run_dir": str(folder), "threads": threads, "precision": "32"})

    def run(self, params: dict[str, Any], folder: Path, threads: int, callbacks: list[Any],
            record: dict[str, Any]) -> dict[str, Any]:
        from torchwork import seed_everything
        from torchwork.recipes.sentiment import fit_ngram

        config = self.config_for(params, folder, threads)
        seed_everything(config.seed)
        log = io.StringIO()
        with contextlib.redirect_stdout(log):  # the trial's epochs go to its folder, not the console
            fitted = fit_ngram(config, self.splits["train"], self.splits["validation"], self.classes, None,
                               record, [*callbacks, BudgetStop(self.plan, params, callbacks[0])])
        run_path = fitted["trainer"].run_path
        (Path(folder) / "output.log").write_text(log.getvalue())
        self.training_seconds = fitted["training_seconds"]
        if record["tune"]["trial"] == 0:
            self.default_predictions = _test_predictions(fitted, run_path, self.splits["test"])
        best = read_best_record(run_path)
        return {"value": float(best["value"]), "history": fitted["history"], "run_path": run_path,
                "precision": "32"}


def _test_predictions(fitted: dict[str, Any], run_path: Path, test: Any) -> list[int]:
    """The default settings' model (its best checkpoint) on the test split: scored only after tuning, against
    the tuned model, never to choose."""
    import torch

    from torchwork.data import loader

    fitted["model"].load_state_dict(torch.load(run_path / "checkpoints" / "best.pt", weights_only=True)["model"])
    test_loader = loader(test, 512, num_workers=0, preprocessor=fitted["preprocessor"])
    return [int(i) for i in fitted["trainer"].predict(test_loader).argmax(dim=-1).tolist()]


def _open(target: Any, space: Any) -> tuple[Any, Path]:
    """A new study under the target's ``tune/`` folder, its storage the embedded SQLite file."""
    from torchwork.tune.storage import default_url, open_storage
    from torchwork.tune.study import open_study

    name = "fit-budget-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    folder = Path(target.study_root) / name
    folder.mkdir(parents=True, exist_ok=True)
    record = {"objective": target.objective["name"], "direction": "maximize", "space": space.describe(),
              "seed": target.seed, "base": target.base}
    study = open_study(open_storage(default_url(folder)), name, record)
    return study, folder


def _queue(study: Any, space: Any, number: int, target: Any) -> dict[str, Any]:
    """Queue trial ``number``: the default settings for 0, the space's point ``number`` after."""
    params = target.defaults(space.names) if number == 0 else space.params_for(number, target.seed)
    study.enqueue_trial(params, user_attrs={"trial": number, "attempt": 0})
    return params


def study_trials(plan: Any, config: Any, space_mapping: dict[str, Any], train: Any, validation: Any, test: Any,
                 classes: list[str]) -> dict[str, Any]:
    """The n-gram model's trials (``fit --time-budget --quick``): :func:`run_study` of :class:`NgramTrials`."""
    target = NgramTrials(plan, config, {"train": train, "validation": validation, "test": test}, classes)
    return run_study(plan, target, space_mapping)


def run_study(plan: Any, target: Any, space_mapping: dict[str, Any]) -> dict[str, Any]:
    """Run the trials of ``target`` the plan lets start; returns the trials, the best params and trial 0's test
    predictions (``default_predictions``)."""
    import torch

    from torchwork.tune.space import Space
    from torchwork.tune.trial import claim, run_trial

    space = Space.from_mapping(space_mapping, set(target.integer_settings))
    study, folder = _open(target, space)
    trials: list[dict[str, Any]] = []
    print(f"\n== Tuning inside the time budget: {', '.join(space.names)}; study {folder}", flush=True)
    for number in range(MAX_TRIALS):
        params = space.params_for(number, target.seed) if number else _queue(study, space, 0, target)
        go, why = plan.may_start(params)
        if not go:
            trials.append({"trial": number, "state": "NOT STARTED", "params": params, "why": why})
            print(f"trial {number:>3} {why}", flush=True)
            break
        if number:
            _queue(study, space, number, target)
        info = run_trial(study, claim(study), target, space, folder, torch.get_num_threads(), heartbeat_s=5)
        if info["state"] == "FAIL" and number == 0:  # the default settings: the recipe itself fails
            raise ConfigError(f"the first trial (the default settings) failed: {info['error']} "
                              f"(in {folder}/trials/0/trial.json)")
        if info["state"] in ("COMPLETE", "PRUNED"):
            plan.learn(params, info["seconds"], target.training_seconds, info.get("epochs", 1))
        trials.append({k: info.get(k) for k in ("trial", "state", "value", "seconds", "epochs", "params")}
                      | {"why": why})
        best = _best(trials)
        plan.best = best["params"] if best else None
        print(_line(trials[-1], best), flush=True)
    best = _best(trials)
    if best is None:
        raise ConfigError(f"no trial of the budget's study completed: each one's error is in {folder}/trials/<n>/"
                          "trial.json.")
    return {"study": str(folder), "trials": trials, "best_trial": best["trial"], "best_params": best["params"],
            "best_value": best["value"], "default_predictions": target.default_predictions}


def _best(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    complete = [t for t in trials if t["state"] == "COMPLETE"]
    return max(complete, key=lambda t: (t["value"], -t["trial"])) if complete else None


def _line(trial: dict[str, Any], best: dict[str, Any] | None) -> str:
    params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial["params"].items())
    score = f"val macro-F1 {trial['value']:.4f}" if trial.get("value") is not None else ""
    tail = f"; best {best['value']:.4f} (trial {best['trial']})" if best else ""
    return f"trial {trial['trial']:>3} {trial['state']:<8} {score} ({params}) {trial['seconds']:.1f} s{tail}"
