"""A user's own objective as what a study tunes: a function of the trial that builds a Trainer and returns
the validation metric.

The objective is named by a string, ``path/to/file.py:function`` or ``package.module:function``
(:mod:`torchwork.user_code`), never pickled: every worker process loads it itself, and so does a worker
started again after one was killed. It is the user's own code, which they asked torchwork to run.

The function gets a :class:`TrialSetup` and returns the trial's score (a finite number):

.. code-block:: python

    def objective(trial):
        model = ...
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=trial.params["lr"]), loss_fn,
                          run_dir=trial.run_dir, callbacks=trial.callbacks, threads=trial.threads,
                          config={"lr": trial.params["lr"], **trial.record})
        trainer.fit(train_loader, val_loader, epochs=trial.params["epochs"])
        return min(logs["val_loss"] for logs in trainer.history)

``run_dir=trial.run_dir`` is what makes it crash-safe: the retry of a killed trial resumes the newest run
there from its last checkpoint (the engine's ``TORCHWORK_RESUME``); ``callbacks=trial.callbacks`` reports
each epoch's ``metric`` to the study and stops a pruned trial.

Example:
    >>> target = ObjectiveTarget("json:dumps", metric="val_loss", direction="minimize")
    >>> target.name, target.objective["direction"]
    ('dumps', 'minimize')
    >>> ObjectiveTarget("json:dumps", metric="val_loss", direction="down")
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: direction 'down': use maximize or minimize.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finite import is_finite_number
from torchwork.quoting import quote_value

RETURNS = "a function of the trial that trains a Trainer and returns its validation score"


@dataclasses.dataclass(frozen=True)
class TrialSetup:
    """What an objective gets: the trial's number, its params (drawn from the trial number and the seed), the
    run folder and thread count to give its Trainer, the study's seed, the callbacks (the pruning callback)
    and ``record`` (the study, trial and params, for the run's manifest: ``config={..., **trial.record}``)."""

    number: int
    params: dict[str, Any]
    run_dir: Path
    threads: int
    seed: int
    callbacks: list[Any]
    record: dict[str, Any]


class ObjectiveTarget:
    """A study's target when the user brings the objective; same interface as ``RecipeTarget``."""

    has_final_runs = False  # no recipe defaults to compare with, no test split the tuner knows of

    def __init__(self, spec: str, metric: str, direction: str = "maximize", run_dir: str | Path = "runs",
                 seed: int = 0) -> None:
        from torchwork.user_code import is_file_spec, load_function

        if direction not in ("maximize", "minimize"):
            raise ConfigError(f"direction {direction!r}: use maximize or minimize.")
        if not isinstance(metric, str) or not metric:
            raise ConfigError("metric: name the Trainer's per-epoch validation metric the objective returns "
                              "(e.g. 'val_loss'); the pruner reads it every epoch.")
        self.spec, self.seed = spec, seed
        self.function = load_function(spec, "objective", RETURNS)
        place, _, name = spec.rpartition(":")
        # the file resolved now, so that workers started from elsewhere load the same one
        self.location = f"{Path(place).resolve()}:{name}" if is_file_spec(place) else spec
        self.name = name
        self.objective = {"name": metric, "direction": direction,
                          "description": f"the value {spec} returns; pruned on the Trainer's per-epoch {metric}"}
        self.config = None
        self.integer_fields: set[str] | None = None  # a range of integers is an integer range
        self.run_dir = Path(run_dir)

    def describe(self) -> dict[str, Any]:
        """What the study records about its base (compared when the study is run again)."""
        return {"objective": self.spec, "metric": self.objective["name"]}

    def worker_base(self) -> dict[str, Any]:
        """What a worker needs to build this target again."""
        return {**self.describe(), "location": self.location, "direction": self.objective["direction"],
                "run_dir": str(self.run_dir)}

    @classmethod
    def from_worker_base(cls, base: dict[str, Any], seed: int) -> ObjectiveTarget:
        target = cls(base["location"], base["metric"], base["direction"], base["run_dir"], seed)
        target.spec = base["objective"]
        return target

    def check_space(self, space: Any) -> None:
        """Any setting name is the objective's own; the tuner's settings cannot be tuned."""
        from torchwork.tune.space import check_names
        from torchwork.tune.target import TUNER_SETTINGS

        check_names(space, [s.name for s in space.settings if s.name not in TUNER_SETTINGS], TUNER_SETTINGS)

    def config_for(self, params: dict[str, Any], folder: str | Path, threads: int) -> None:
        return None  # the objective builds its own; the pruning callback learns the epochs from its fit

    def run(self, params: dict[str, Any], folder: Path, threads: int, callbacks: list[Any],
            record: dict[str, Any]) -> dict[str, Any]:
        setup = TrialSetup(number=int(record["tune"]["trial"]), params=dict(params), run_dir=Path(folder),
                           threads=threads, seed=self.seed, callbacks=list(callbacks), record=record)
        value = self.function(setup)
        if not is_finite_number(value):
            raise ConfigError(f"the objective {self.spec} returned {quote_value(value)}: it must return the trial's score, "
                              "a finite number.")
        trainer = next((c.trainer for c in callbacks if getattr(c, "trainer", None) is not None), None)
        if trainer is None or trainer.run_path is None:
            raise ConfigError(f"the objective {self.spec} did not train a Trainer with run_dir=trial.run_dir and "
                              "callbacks=trial.callbacks: without them a killed trial cannot resume, nor be pruned.")
        return {"value": float(value), "history": list(trainer.history), "run_path": str(trainer.run_path),
                "precision": None}

    def full_config(self, params: dict[str, Any], threads: int, precision: str | None, run_dir: str) -> dict[str, Any]:
        """``best.yaml``: the objective and the best trial's params (``trial.params``)."""
        return {"objective": self.spec, "metric": self.objective["name"], "threads": threads, "params": dict(params)}
