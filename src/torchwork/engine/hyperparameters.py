"""The optimizer's hyperparameters, checked before any work starts: every number in each param group finite
(``lr``, ``momentum``, ``weight_decay``, ``eps``, each of ``betas``, ...) and ``lr`` not negative.

torch checks few of them (``SGD(lr=nan)`` is accepted, and a param group can be edited after the optimizer
is built): a NaN or infinite value trains NaN weights without an error. The Trainer checks them when it is
built and again when ``fit`` starts, before the run folder is made.

Example:
    >>> import torch
    >>> weight = torch.nn.Parameter(torch.zeros(2))
    >>> check_param_groups(torch.optim.SGD([weight], lr=0.1, momentum=0.9))
    >>> check_param_groups(torch.optim.SGD([weight], lr=float("nan")))
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: optimizer param_groups[0]['lr']=nan is not a finite number: pass a finite value (lr >= 0; 0 freezes the group).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from torchwork.errors import ConfigError

_HINT = {"lr": "lr >= 0; 0 freezes the group", "betas": "each in [0, 1), e.g. betas=(0.9, 0.999)",
         "eps": "e.g. eps=1e-8"}


def _numbers(value: Any) -> Iterator[tuple[str, float]]:
    """Each number in a param group's ``value`` as (where in the value, the number): a plain int or float,
    a one-element tensor's item, the entries of a tuple or list (``betas``); nothing for anything else
    (bools, strings, None, the ``params`` list)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield "", float(value)
    elif isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        yield "", float(value.detach().item())  # a tensor lr (capturable or compiled optimizers)
    elif isinstance(value, (tuple, list)):
        for index, entry in enumerate(value):
            for where, number in _numbers(entry):
                yield f"[{index}]{where}", number


def check_param_groups(optimizer: torch.optim.Optimizer) -> None:
    """Refuse, with one line naming the group, the key and the value, a number in ``optimizer.param_groups``
    that is NaN or infinite, and a negative ``lr`` (0 is allowed: a frozen group)."""
    for index, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key == "params":
                continue
            for where, number in _numbers(value):
                shown = f"param_groups[{index}][{key!r}]{where}"
                hint = _HINT.get(key, "")
                if not math.isfinite(number):
                    raise ConfigError(f"optimizer {shown}={number!r} is not a finite number: pass a finite value"
                                      + (f" ({hint})." if hint else "."))
                if key == "lr" and number < 0:
                    raise ConfigError(f"optimizer {shown}={number!r} is negative: pass a learning rate >= 0 "
                                      "(0 freezes the group).")
