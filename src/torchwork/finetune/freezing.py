"""Freezing by module name: ``freeze``, ``unfreeze``, ``trainable_parameters``.

A pattern is a module-name glob (``"encoder.layer.[0-3]"``, ``"embeddings"``) naming a module and all it
holds; ``up_to="encoder.layer.3"`` selects every parameter registered before that module's last one
(the bottom of the network). With no pattern and no ``up_to``, the whole model. Frozen BatchNorm layers
are put in eval mode by ``Trainer.fit`` at every epoch start (their running statistics do not drift);
in your own loop call :func:`keep_frozen_norms_in_eval` after ``model.train()`` (defined with the
engine's train modes, :mod:`torchwork.engine.modes`, which ``fit`` applies; the engine lies below finetune).

Example:
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Linear(8, 2))
    >>> freeze(model, up_to="2")
    ['0.weight', '0.bias', '2.weight', '2.bias']
    >>> [p.shape[0] for p in trainable_parameters(model)]
    [2, 2]
    >>> unfreeze(model, "2")
    ['2.weight', '2.bias']
"""

from __future__ import annotations

from typing import Any

from torchwork.engine.modes import (
    keep_frozen_norms_in_eval as keep_frozen_norms_in_eval,  # its home for users
)
from torchwork.errors import ConfigError
from torchwork.finetune.names import matches


def select(model: Any, patterns: tuple[str, ...] = (), up_to: str | None = None) -> list[tuple[str, Any]]:
    """``(name, parameter)`` pairs named by ``patterns`` and/or ``up_to`` (all of them when neither)."""
    named = list(model.named_parameters())
    if not patterns and up_to is None:
        return named
    chosen: dict[str, Any] = {}
    if patterns:
        for pattern in patterns:
            if not isinstance(pattern, str):
                raise ConfigError(f"freeze/unfreeze patterns are module-name globs (str), got {pattern!r}.")
        chosen.update((n, p) for n, p in named if matches(n, patterns))
        if not chosen:
            raise ConfigError(f"no parameter lies in a module named {list(patterns)}. Module names look like "
                              f"{_example_names(model)}.")
    if up_to is not None:
        inside = [i for i, (n, _) in enumerate(named) if matches(n, [up_to])]
        if not inside:
            raise ConfigError(f"up_to={up_to!r} names no module with parameters. Module names look like "
                              f"{_example_names(model)}.")
        chosen.update(named[: inside[-1] + 1])
    return [(n, p) for n, p in named if n in chosen]


def freeze(model: Any, *patterns: str, up_to: str | None = None) -> list[str]:
    """Set ``requires_grad=False`` on the selected parameters; returns the names that changed."""
    return _set(model, patterns, up_to, False)


def unfreeze(model: Any, *patterns: str, up_to: str | None = None) -> list[str]:
    """Set ``requires_grad=True`` on the selected parameters; returns the names that changed."""
    return _set(model, patterns, up_to, True)


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters with ``requires_grad=True``, in registration order (what an optimizer should hold)."""
    return [p for p in model.parameters() if p.requires_grad]


def _set(model: Any, patterns: tuple[str, ...], up_to: str | None, flag: bool) -> list[str]:
    changed = []
    for name, param in select(model, patterns, up_to):
        if param.requires_grad != flag:
            if flag and not (param.is_floating_point() or param.is_complex()):
                continue  # integer parameters cannot require gradients
            param.requires_grad_(flag)
            changed.append(name)
    return changed


def _example_names(model: Any) -> list[str]:
    return [n for n, m in model.named_modules() if n and any(True for _ in m.parameters(recurse=False))][:6]
