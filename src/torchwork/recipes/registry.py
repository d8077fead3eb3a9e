"""Recipe names -> their module, their configs resolved and run (``torchwork train`` / ``quickstart`` / ``fit``
call these from :mod:`torchwork.recipes.cli`).

A recipe module has a config dataclass and ``run(config, serve=False) -> dict``. A YAML config names its
recipe and sets any of the dataclass's fields::

    recipe: sentiment
    epochs: 6
    lr: 0.01

Example:
    >>> from torchwork.recipes.registry import resolve
    >>> name, config = resolve("sentiment", ["epochs=2"])
    >>> name, config.epochs
    ('sentiment', 2)
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError

RECIPES: dict[str, tuple[str, str]] = {
    "sentiment": ("torchwork.recipes.sentiment", "SentimentConfig"),
    "fashion": ("torchwork.recipes.fashion", "FashionConfig"),
}


def resolve(recipe_or_config: str, assignments: list[str] | None = None) -> tuple[str, Any]:
    """The recipe name and its validated config, from a recipe name or a YAML file, plus ``key=value``s."""
    from torchwork.recipes.config import apply_overrides, parse_assignments, read_yaml

    values: dict[str, Any] = {}
    name = recipe_or_config
    given = Path(recipe_or_config)
    if recipe_or_config.endswith((".yaml", ".yml")) or given.is_file() or given.is_dir():
        values = read_yaml(recipe_or_config)
        name = values.pop("recipe", None)
        if not name:
            raise ConfigError(f"{recipe_or_config} must say which recipe it configures, e.g. 'recipe: sentiment' "
                              f"(recipes: {', '.join(RECIPES)}).")
        if not isinstance(name, str):  # `recipe: [sentiment]`, `recipe: {a: b}`, `recipe: 3`
            raise ConfigError(f"{recipe_or_config}: recipe: {name!r:.60} must be one recipe's name, e.g. "
                              f"'recipe: sentiment' (recipes: {', '.join(RECIPES)}).")
    if name not in RECIPES:
        import difflib

        close = difflib.get_close_matches(str(name), list(RECIPES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown recipe {name!r}.{hint} Recipes: {', '.join(RECIPES)}.")
    module, config_class = RECIPES[name]
    config = getattr(importlib.import_module(module), config_class)()
    values.update(parse_assignments(assignments or []))
    return name, apply_overrides(config, values)


def run_recipe(name: str, config: Any, serve: bool = False, budget: Any = None) -> dict[str, Any]:
    """Run recipe ``name``; ``budget`` (a :class:`~torchwork.recipes.fit_budget.BudgetPlan`): tuned inside it."""
    module = importlib.import_module(RECIPES[name][0])
    return module.run(config, serve=serve, budget=budget) if budget is not None else module.run(config, serve=serve)


def quickstart_config(recipe: str, settings: Sequence[str] = (), quick: bool = False) -> tuple[str, Any]:
    """The recipe name and config ``torchwork quickstart`` runs: the quickstart's defaults, then (``quick``)
    the quick settings of the recipe and of its model, then the user's ``settings``, which win.

    Example:
        >>> quickstart_config("sentiment")[1].model
        'transformer'
        >>> quickstart_config("sentiment", ["model=ngram"], quick=True)[1].subset
        3000
    """
    if recipe in RECIPES:
        _refuse_other_recipes_settings(recipe, settings)
    user = [*QUICKSTART_DEFAULTS.get(recipe, []), *settings]
    name, config = resolve(recipe, [*QUICK.get(recipe, []), *user] if quick else user)
    extra = QUICK.get(f"{name}:{getattr(config, 'model', '')}", []) if quick else []
    if extra:  # the model's own quick settings, still overridden by the user's
        name, config = resolve(recipe, [*QUICK.get(recipe, []), *extra, *user])
    return name, config


def _settings_of(recipe: str) -> set[str]:
    import dataclasses

    module, config_class = RECIPES[recipe]
    return {field.name for field in dataclasses.fields(getattr(importlib.import_module(module), config_class))}


def _refuse_other_recipes_settings(recipe: str, settings: Sequence[str]) -> None:
    """A ConfigError for a setting that ``recipe`` lacks and another recipe has (``quickstart --pretrained``,
    a fashion setting, without ``--recipe fashion``): it names the recipe to choose."""
    from torchwork.recipes.config import parse_assignments

    own = _settings_of(recipe)
    for key in parse_assignments(list(settings)):
        others = [other for other in RECIPES if other != recipe and key not in own and key in _settings_of(other)]
        if others:
            raise ConfigError(f"{key} is a setting of the {others[0]} recipe, not of {recipe}: add --recipe "
                              f"{others[0]}.")


# What the quickstart (the main job) runs unless told otherwise: the fine-tuned transformer, about 8 minutes
# on 2 CPU cores (`torchwork train sentiment` keeps the recipe's own default, the n-gram model: seconds a
# step under DDP, no download).
QUICKSTART_DEFAULTS: dict[str, list[str]] = {"sentiment": ["model=transformer"]}

# A few minutes of CPU at most: subsets and fewer epochs, for a first look and for CI.
QUICK: dict[str, list[str]] = {
    "sentiment": ["subset=3000", "epochs=8", "batch_size=64"],
    "fashion": ["subset=6000", "epochs=1"],
    "sentiment:transformer": ["subset=1000", "transformer_epochs=2"],
}
