"""What a study tunes: a recipe (its config, its settings, its validation objective).

A recipe module that can be tuned has ``validation_objective(config, callbacks, record) -> {"value",
"history", "run_path", ...}`` (trains with the Trainer, reads no test split) and ``OBJECTIVE`` (its name,
direction and description).

Example:
    >>> target = RecipeTarget("sentiment", ["subset=300"])
    >>> target.objective["name"], target.objective["direction"]
    ('val_macro_f1', 'maximize')
    >>> target.config_for({"lr": 0.01}, "runs/x", threads=1).lr
    0.01
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError

# Settings the tuner sets itself for every trial, and why they cannot be tuned.
TUNER_SETTINGS = {"run_dir": "each trial runs in its own folder of the study",
                  "threads": "the tuner gives each worker floor(cores / workers) threads",
                  "seed": "the study's --seed seeds every trial; tune the params, not the seed"}


class RecipeTarget:
    """A recipe (name or YAML config) plus ``--set`` settings, as the base of every trial."""

    has_final_runs = True  # the defaults' validation score and the best settings' test score, after the trials

    def __init__(self, recipe_or_config: str, settings: list[str] | None = None, seed: int | None = None) -> None:
        from torchwork.recipes.registry import RECIPES, resolve

        self.recipe_or_config, self.settings = recipe_or_config, list(settings or [])
        self.name, config = resolve(recipe_or_config, self.settings)
        if seed is not None and hasattr(config, "seed"):
            from torchwork.recipes.config import apply_overrides

            config = apply_overrides(config, {"seed": seed})
        if getattr(config, "precision", None) == "auto":
            from torchwork.recipes.config import apply_overrides

            # "auto" chooses by timing, which the machine's load sways: trials (and their retries) would not
            # all train alike. Trials train in fp32 unless --set precision= says otherwise.
            config = apply_overrides(config, {"precision": "32"})
        self.config = config
        self.module = importlib.import_module(RECIPES[self.name][0])
        if not hasattr(self.module, "validation_objective"):
            raise ConfigError(f"recipe {self.name!r} has no validation objective to tune yet "
                              f"(tunable: {', '.join(tunable_recipes())}).")
        self.objective: dict[str, str] = dict(self.module.OBJECTIVE)

    @property
    def fields(self) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(self.config))

    @property
    def integer_fields(self) -> set[str]:
        hints = typing.get_type_hints(type(self.config))
        return {name for name, hint in hints.items() if hint is int or hint == (int | None)}

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run_dir)

    def describe(self) -> dict[str, Any]:
        """What the study records about its base (compared when the study is run again)."""
        # run_dir may differ from machine to machine running the same study
        return {"recipe": self.name, "config": self.recipe_or_config,
                "settings": [s for s in self.settings if not s.replace(" ", "").startswith("run_dir=")]}

    def worker_base(self) -> dict[str, Any]:
        """What a worker needs to build this target again."""
        return self.describe()

    @classmethod
    def from_worker_base(cls, base: dict[str, Any], seed: int) -> RecipeTarget:
        return cls(base["config"], base["settings"], seed=seed)

    def config_for(self, params: dict[str, Any], folder: str | Path, threads: int) -> Any:
        """The config of one trial: the base, its params, its folder and thread count (validated)."""
        from torchwork.recipes.config import apply_overrides

        return apply_overrides(self.config, {**params, "run_dir": str(folder), "threads": threads})

    def check_space(self, space: Any) -> None:
        """Every value the space can give must be a valid setting of the recipe (one error naming each)."""
        from torchwork.recipes.config import apply_overrides
        from torchwork.tune.space import check_names

        check_names(space, self.fields, TUNER_SETTINGS)
        problems = []
        for setting in space.settings:
            for value in setting.extremes():
                try:
                    apply_overrides(self.config, {setting.name: value})
                except ConfigError as error:
                    problems.append(str(error).rstrip("."))
                    break
        if problems:
            raise ConfigError("space: values the recipe refuses: " + "; ".join(problems) + ". Narrow the range.")

    def run(self, params: dict[str, Any], folder: Path, threads: int, callbacks: list[Any],
            record: dict[str, Any]) -> dict[str, Any]:
        config = self.config_for(params, folder, threads)
        return dict(self.module.validation_objective(config, callbacks=callbacks, record=record))

    def full_config(self, params: dict[str, Any], threads: int, precision: str | None, run_dir: str) -> dict[str, Any]:
        """``best.yaml``: every setting of the recipe, with ``recipe:`` first, so that ``torchwork train``
        reruns the trial (same threads, and the precision the trial used, so that it is not measured again)."""
        config = self.config_for(params, run_dir, threads)
        values = {"recipe": self.name, **_plain(dataclasses.asdict(config))}
        if precision is not None and "precision" in values:
            values["precision"] = precision
        return values


def tunable_recipes() -> list[str]:
    from torchwork.recipes.registry import RECIPES

    return [name for name, (module, _) in RECIPES.items()
            if hasattr(importlib.import_module(module), "validation_objective")]


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}
