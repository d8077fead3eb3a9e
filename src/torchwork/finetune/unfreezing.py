"""Gradual unfreezing: layer groups unfrozen on an epoch schedule, added to the optimizer by identity.

At the start of epoch ``e`` the modules named by ``schedule[e]`` are unfrozen; every newly trainable
parameter the optimizer does not hold (by identity, never by value: two equal tensors are two
parameters) is added as a new group with its planned lr and weight decay from :func:`param_groups`,
scaled by where the scheduler is now, and the scheduler learns the new group (``base_lrs``,
``lr_lambdas``, ...), so every group follows the same schedule. The callback's state (which epochs were
applied) is checkpointed; on resume it re-applies them before the optimizer state loads, so a resumed
run has the same groups frozen, the same optimizer groups and the same schedule as an uninterrupted one.

Example:
    >>> import torch
    >>> from torch import nn
    >>> from torchwork.finetune import freeze, param_groups
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> _ = freeze(model, "0")
    >>> plan = param_groups(model, lr=0.1, head="2")
    >>> optimizer = torch.optim.SGD(plan, lr=0.1)
    >>> callback = GradualUnfreezing(optimizer, plan, {1: "0"})
    >>> callback.unfreeze_for_epoch(1)
    ['0.weight', '0.bias']
    >>> len(optimizer.param_groups), model[0].weight.requires_grad
    (4, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torchwork.engine.callbacks import Callback
from torchwork.errors import ConfigError
from torchwork.finetune.names import matches
from torchwork.quoting import quote_value

# Schedulers whose per-group state is base_lrs (+ lr_lambdas): a new group can join them consistently.
_UNSUPPORTED = ("SequentialLR", "ChainedScheduler", "CyclicLR", "ReduceLROnPlateau", "CosineAnnealingWarmRestarts")


class GradualUnfreezing(Callback):
    """Unfreeze ``schedule[epoch]`` (module-name globs) at the start of each scheduled epoch.

    Args:
        optimizer: the optimizer built from ``plan`` (it may hold only the trainable part).
        plan: the :class:`~torchwork.finetune.groups.ParamGroups` of the model (planned lr per parameter).
        schedule: ``{epoch: pattern or [patterns]}``, e.g. ``{1: "encoder.layer.5", 2: "encoder.layer.4"}``.
        scheduler: the LR scheduler stepping this optimizer, if any (kept consistent).
        verbose: print what was unfrozen and the optimizer's new groups.
    """

    def __init__(self, optimizer: Any, plan: Any, schedule: Mapping[int, str | Sequence[str]],
                 scheduler: Any = None, verbose: bool = False) -> None:
        if not hasattr(plan, "groups_for"):
            raise ConfigError("GradualUnfreezing needs the plan from torchwork.finetune.param_groups(model, ...).")
        self.model_params = {p.name: p.param for p in plan.plan}
        self.schedule: dict[int, list[str]] = {}
        for epoch, patterns in schedule.items():
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ConfigError(f"GradualUnfreezing schedule key {quote_value(epoch)}: use epoch numbers >= 0.")
            self.schedule[epoch] = [patterns] if isinstance(patterns, str) else list(patterns)
            self._matched(self.schedule[epoch], epoch)  # a misspelt name is found now, not epochs into training
        if scheduler is not None and type(scheduler).__name__ in _UNSUPPORTED:
            raise ConfigError(f"GradualUnfreezing cannot add groups to a {type(scheduler).__name__} consistently; "
                              "use LambdaLR, OneCycleLR, StepLR, CosineAnnealingLR, LinearLR or similar.")
        if scheduler is not None and getattr(scheduler, "optimizer", optimizer) is not optimizer:
            raise ConfigError("the scheduler given to GradualUnfreezing steps another optimizer.")
        self.optimizer, self.plan, self.scheduler, self.verbose = optimizer, plan, scheduler, verbose
        self.applied: list[int] = []

    def unfreeze_for_epoch(self, epoch: int) -> list[str]:
        """Unfreeze what ``schedule[epoch]`` names and add it to the optimizer; returns the names added."""
        if epoch in self.applied or epoch not in self.schedule:
            return []
        names = self._selected(self.schedule[epoch], epoch)
        held = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        adding = [n for n in names if id(self.model_params[n]) not in held and self.model_params[n].requires_grad]
        for group in self.plan.groups_for([self.model_params[n] for n in adding]):
            self._add_group(group)
        self.applied.append(epoch)
        if self.verbose:
            print(f"epoch {epoch}: unfroze {len(adding)} parameter tensor(s) of {self.schedule[epoch]}; the "
                  f"optimizer now has {len(self.optimizer.param_groups)} groups")
        return adding

    def _matched(self, patterns: list[str], epoch: int) -> list[str]:
        """The planned parameters' names the patterns match; a ConfigError when they match none."""
        names = [n for n in self.model_params if matches(n, patterns)]
        if not names:
            raise ConfigError(f"GradualUnfreezing schedule[{epoch}]: {patterns} name no parameter of the model "
                              f"(names look like {list(self.model_params)[:3]}).")
        return names

    def _selected(self, patterns: list[str], epoch: int) -> list[str]:
        """Unfreeze the planned parameters the patterns name; returns their names."""
        names = self._matched(patterns, epoch)
        for name in names:
            param = self.model_params[name]
            if param.is_floating_point() or param.is_complex():
                param.requires_grad_(True)
        return names

    def _add_group(self, group: dict[str, Any]) -> None:
        planned = group["lr"]
        reference = self.optimizer.param_groups[0]
        scale = 1.0
        if self.scheduler is not None and reference.get("initial_lr"):
            scale = reference["lr"] / reference["initial_lr"]
        group = dict(group, lr=planned * scale)
        if self.scheduler is not None:
            group["initial_lr"] = planned
            for key in ("max_lr", "min_lr"):  # OneCycleLR keeps its bounds per group
                if key in reference and reference.get("initial_lr"):
                    group[key] = planned * reference[key] / reference["initial_lr"]
        self.optimizer.add_param_group(group)
        scheduler = self.scheduler
        if scheduler is not None:
            scheduler.base_lrs.append(planned)
            if hasattr(scheduler, "lr_lambdas"):
                scheduler.lr_lambdas.append(scheduler.lr_lambdas[0])
            if hasattr(scheduler, "_last_lr"):
                scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def on_fit_start(self, trainer: Any) -> None:
        for epoch in sorted(self.schedule):
            if epoch <= trainer.epoch:
                self.unfreeze_for_epoch(epoch)

    def on_epoch_end(self, trainer: Any, logs: dict[str, Any]) -> None:
        # Unfrozen here, before the end-of-epoch checkpoint: a resume from it starts the next epoch unfrozen.
        self.unfreeze_for_epoch(int(trainer.epoch) + 1)  # trainer.epoch: 0-based, the epoch just ended

    def state_dict(self) -> dict[str, Any]:
        return {"applied": list(self.applied)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for epoch in state.get("applied", []):
            self.unfreeze_for_epoch(epoch)

