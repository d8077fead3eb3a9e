"""``param_groups``: real per-group learning rates for discriminative / layer-wise-decayed fine-tuning.

Each group carries its own ``lr`` (what every optimizer and scheduler reads), not a scale factor that
one scheduler knows about. Layers are found automatically: the parameters before the model's first
``ModuleList`` (embeddings, a stem) are layer 0, its children are layers 1..n, what follows is n+1 and
the head is the top. With ``layer_decay=d`` layer ``k`` gets ``lr * d ** (top - k)``. Biases and norm
parameters get no weight decay. Frozen parameters are planned (a later unfreeze adds them with their
planned lr) but left out of the groups unless ``include_frozen=True``.

Example:
    >>> from torch import nn
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.embed = nn.Linear(4, 8)
    ...         self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
    ...         self.head = nn.Linear(8, 2)
    >>> plan = param_groups(Net(), lr=1e-3, layer_decay=0.5, head="head", weight_decay=0.01)
    >>> [(g["name"], g["lr"], g["weight_decay"]) for g in plan][:3]
    [('embed', 0.000125, 0.01), ('embed', 0.000125, 0.0), ('blocks.0', 0.00025, 0.01)]
    >>> print(plan)  # doctest: +NORMALIZE_WHITESPACE
    module    parameters  trainable  in optimizer  lr        weight decay
    embed             40         40            40  0.000125  0.01 (0 for 1 bias/norm)
    blocks.0          72         72            72  0.00025   0.01 (0 for 1 bias/norm)
    blocks.1          72         72            72  0.0005    0.01 (0 for 1 bias/norm)
    head              18         18            18  0.001     0.01 (0 for 1 bias/norm)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from torchwork.errors import ConfigError
from torchwork.finetune._table import format_table
from torchwork.finetune.names import matches
from torchwork.finite import is_finite_number
from torchwork.quoting import quote_value


@dataclasses.dataclass
class PlannedParameter:
    name: str
    param: Any
    unit: str  # the layer it belongs to (a module name)
    depth: int
    lr: float
    weight_decay: float


class ParamGroups(list):
    """The optimizer groups (a list of dicts: pass it to any ``torch.optim`` optimizer) and the plan of
    every parameter, frozen ones included."""

    def __init__(self, groups: Iterable[dict[str, Any]], plan: Sequence[PlannedParameter]) -> None:
        super().__init__(groups)
        self.plan = list(plan)
        self._by_id = {id(p.param): p for p in self.plan}

    def planned(self, param: Any) -> PlannedParameter:
        """The plan of one parameter (looked up by identity)."""
        try:
            return self._by_id[id(param)]
        except KeyError:
            raise ConfigError("this parameter is not in the plan: build param_groups from the model that "
                              "holds it.") from None

    def groups_for(self, params: Iterable[Any]) -> list[dict[str, Any]]:
        """Optimizer groups for ``params`` with their planned lr and weight decay (one per layer and decay)."""
        return _group([self.planned(p) for p in params])

    def table(self, optimizer: Any = None) -> str:
        """module, parameters, trainable, in optimizer (by identity: ``optimizer``'s groups, else these),
        lr, weight decay."""
        groups = optimizer.param_groups if optimizer is not None else self
        held = {id(p) for g in groups for p in g["params"]}
        lrs = {id(p): g["lr"] for g in groups for p in g["params"]}
        units: dict[str, list[PlannedParameter]] = {}
        for entry in self.plan:
            units.setdefault(entry.unit, []).append(entry)
        rows = []
        for unit, entries in units.items():
            numel = sum(e.param.numel() for e in entries)
            trainable = sum(e.param.numel() for e in entries if e.param.requires_grad)
            in_opt = sum(e.param.numel() for e in entries if id(e.param) in held)
            lr = sorted({lrs.get(id(e.param), e.lr) for e in entries})
            decays = [e.weight_decay for e in entries]
            undecayed = sum(1 for d in decays if d == 0)
            top = max(decays)
            decay = f"{top:g}" + (f" (0 for {undecayed} bias/norm)" if undecayed and top else "")
            rows.append([unit, numel, trainable, in_opt, " / ".join(f"{v:.3g}" for v in lr), decay])
        return format_table(["module", "parameters", "trainable", "in optimizer", "lr", "weight decay"], rows)

    def __str__(self) -> str:
        return self.table()

    __repr__ = list.__repr__


def param_groups(model: Any, lr: float, *, layer_decay: float | None = None, head: str | Sequence[str] | None = None,
                 head_lr: float | None = None, weight_decay: float = 0.01,
                 no_decay: Sequence[str] = ("bias", "norm"), layers: Sequence[str] | None = None,
                 include_frozen: bool = False) -> ParamGroups:
    """Plan per-layer learning rates and weight decay; returns :class:`ParamGroups`.

    Args:
        model: the model to fine-tune.
        lr: the head's learning rate (unless ``head_lr``); the top layer below the head gets
            ``lr * layer_decay``, the next ``lr * layer_decay ** 2``, and so on down (in the example,
            ``blocks.1`` gets 0.0005 for ``lr=1e-3, layer_decay=0.5``).
        layer_decay: multiply the lr by this for each layer further from the head (None: one lr).
        head: module-name glob(s) of the new head (default: the last top-level module with parameters).
        head_lr: the head's learning rate (default ``lr``).
        weight_decay: for weights; 0 for parameters whose name or module type contains a ``no_decay``
            word (case-insensitive) and for 1-d parameters.
        layers: module-name globs of the layers, bottom first (default: found from the first ModuleList).
        include_frozen: also put frozen parameters in the groups.
    """
    _check_rates(lr, weight_decay, layer_decay, head_lr)
    heads = _heads(model, head)
    named = list(model.named_parameters())
    if not named:
        raise ConfigError("the model has no parameters to plan.")
    units = _units(model, named, heads, layers)
    top = max(depth for _, depth in units.values())
    module_types = {name: type(m).__name__.lower() for name, m in model.named_modules()}
    words = [w.lower() for w in no_decay]
    plan = []
    for name, param in named:
        unit, depth = units[name]
        if matches(name, heads):
            rate = head_lr if head_lr is not None else lr
        else:
            rate = lr * (layer_decay ** (top - depth) if layer_decay is not None else 1.0)
        owner = module_types.get(name.rsplit(".", 1)[0] if "." in name else "", "")
        plain = param.ndim <= 1 or any(w in name.lower() or w in owner for w in words)
        plan.append(PlannedParameter(name, param, unit, depth, rate, 0.0 if plain else float(weight_decay)))
    chosen = [e for e in plan if include_frozen or e.param.requires_grad]
    if not chosen:
        raise ConfigError("every parameter is frozen: unfreeze some (torchwork.finetune.unfreeze) or pass "
                          "include_frozen=True.")
    return ParamGroups(_group(chosen), plan)


def _check_rates(lr: Any, weight_decay: Any, layer_decay: Any, head_lr: Any) -> None:
    """Each a finite number in its range, before anything is planned: a NaN or infinite rate was planned
    into every group (``lr=nan`` trains to NaN weights; torch's optimizers accept it)."""
    least = {"lr": "a positive", "head_lr": "a positive", "weight_decay": "a non-negative"}
    for name, value in (("lr", lr), ("head_lr", head_lr), ("weight_decay", weight_decay)):
        if name == "head_lr" and value is None:
            continue
        if not is_finite_number(value) or value < 0 or (name != "weight_decay" and value == 0):
            raise ConfigError(f"param_groups({name}={quote_value(value)}): use {least[name]} finite number.")
    if layer_decay is not None and not (is_finite_number(layer_decay) and 0 < layer_decay <= 1):
        raise ConfigError(f"param_groups(layer_decay={quote_value(layer_decay)}): use a number in (0, 1] (0.75 "
                          "is common).")


def _group(entries: Sequence[PlannedParameter]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, float, float], dict[str, Any]] = {}
    for e in entries:
        key = (e.unit, e.lr, e.weight_decay)
        if key not in groups:
            groups[key] = {"params": [], "lr": e.lr, "weight_decay": e.weight_decay, "name": e.unit}
        groups[key]["params"].append(e.param)
    return list(groups.values())


def _heads(model: Any, head: str | Sequence[str] | None) -> list[str]:
    if head is not None:
        heads = [head] if isinstance(head, str) else list(head)
        if not any(matches(n, heads) for n, _ in model.named_parameters()):
            raise ConfigError(f"head={head!r} names no module with parameters; top-level modules: "
                              f"{[n for n, _ in model.named_children()]}.")
        return heads
    children = [n for n, m in model.named_children() if any(True for _ in m.parameters())]
    return children[-1:] if children else []


def _units(model: Any, named: list[tuple[str, Any]], heads: list[str],
           layers: Sequence[str] | None) -> dict[str, tuple[str, int]]:
    """Parameter name -> (layer name, depth); the head is the top."""
    import torch

    if layers is not None:
        globs = list(layers)
        found: dict[str, tuple[str, int]] = {}
        for name, _ in named:
            if matches(name, heads):
                continue
            hits = [i for i, g in enumerate(globs) if matches(name, [g])]
            found[name] = (globs[hits[-1]], hits[-1] + 1) if hits else ("(other)", 0)
        top = len(globs) + 1
        found.update({n: (_label(heads), top) for n, _ in named if matches(n, heads)})
        return found
    stack = ""
    for mname, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and not matches(mname, heads) and len(module) > 1:
            stack = mname
            break
    units: dict[str, tuple[str, int]] = {}
    length = len(getattr(model.get_submodule(stack), "_modules", {})) if stack else 0
    seen_stack = False
    for name, _ in named:
        if matches(name, heads):
            continue
        if stack and name.startswith(stack + "."):
            index = name[len(stack) + 1:].split(".", 1)[0]
            position = list(model.get_submodule(stack)._modules).index(index)
            units[name] = (f"{stack}.{index}", position + 1)
            seen_stack = True
        else:
            depth = length + 1 if seen_stack else 0
            units[name] = ("", depth)
    for depth in {d for unit, d in units.values() if not unit}:  # below and above the stack: named by their module
        names = [n for n, (unit, d) in units.items() if not unit and d == depth]
        label = _common_module(names)
        units.update({n: (label, depth) for n in names})
    top = max((d for _, d in units.values()), default=0) + 1
    units.update({n: (_label(heads), top) for n, _ in named if matches(n, heads)})
    return units


def _common_module(names: list[str]) -> str:
    """The deepest module holding every name (``"(top)"`` for the model's own parameters)."""
    parts = [n.split(".")[:-1] for n in names]
    common: list[str] = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return ".".join(common) or ("(top)" if all(not p for p in parts) else ", ".join(sorted({p[0] for p in parts if p})))


def _label(heads: list[str]) -> str:
    return ", ".join(heads) if heads else "head"
