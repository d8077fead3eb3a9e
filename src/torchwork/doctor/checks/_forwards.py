"""Top-level forward passes of trainable models, and whether a backward pass ever used them.

For each call of a model (a module with trainable parameters called outside any other module) the
tracker records the line, the training flag, the Dropout/BatchNorm layers and whether autograd was
recording. When autograd recorded, a tiny hook on the output's ``grad_fn`` tells whether backward reached
it; when the graph is freed without that, the forward was evaluation-like. Evaluation-like forwards are
grouped per model between optimizer steps: a group is *evaluation* when it holds two or more of them, or
when no optimizer step follows it. That rule keeps one-off no-grad forwards inside a training step (a
GAN generating fakes for its discriminator) out of the findings.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from torchwork.doctor.checks import Check
from torchwork.doctor.session import tensors_in

_STOCHASTIC = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm)


@dataclasses.dataclass
class ForwardInfo:
    model: weakref.ReferenceType[nn.Module]
    model_id: int
    name: str
    where: tuple[str, int] | None
    training: bool
    active_layers: list[str]  # Dropout/BatchNorm layers in training mode during this forward
    layer_count: int  # Dropout/BatchNorm layers in the model
    grad_enabled: bool
    steps_at: int
    kind: str = ""  # "no-grad" | "unused" | "used"


class _Usage:
    """Hook object hung on the output's grad_fn: called when backward reaches it; freed with the graph."""

    __slots__ = ("info", "used", "tracker", "__weakref__")

    def __init__(self, info: ForwardInfo, tracker: ForwardTracker) -> None:
        self.info, self.used, self.tracker = info, False, tracker

    def __call__(self, grad_outputs: Any) -> None:
        if not self.used:
            self.used = True
            self.tracker._used(self.info)


class ForwardTracker(Check):
    id = ""

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.used_listeners: list[Callable[[ForwardInfo], None]] = []
        self.evaluation_listeners: list[Callable[[list[ForwardInfo]], None]] = []
        self._layers: dict[int, tuple[weakref.ReferenceType[nn.Module], list[tuple[str, nn.Module]]]] = {}
        self._pending: dict[int, list[ForwardInfo]] = {}
        self._groups: dict[tuple[int, int], list[ForwardInfo]] = {}
        self._alive: weakref.WeakSet[_Usage] = weakref.WeakSet()
        self.stopped = False

    # ----------------------------------------------------------------- helpers
    def _stochastic_layers(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        cached = self._layers.get(id(model))
        if cached is not None and cached[0]() is model:
            return cached[1]
        label = type(model).__name__
        layers = [(f"{label}.{name}" if name else label, m) for name, m in model.named_modules()
                  if isinstance(m, _STOCHASTIC)]
        self._layers[id(model)] = (weakref.ref(model), layers)
        return layers

    @staticmethod
    def _trainable(model: nn.Module) -> bool:
        return next((True for p in model.parameters() if p.requires_grad), False)

    # ----------------------------------------------------------------- events
    def on_module_pre(self, module: nn.Module, args: tuple, kwargs: dict, top: bool) -> None:
        if not top or not self._trainable(module):
            return
        layers = self._stochastic_layers(module)
        active = [f"{name} ({type(m).__name__})" for name, m in layers if m.training]
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        info = ForwardInfo(weakref.ref(module), id(module), self.session.module_name(module),
                           self.session.where(), module.training, active, len(layers), grad,
                           self.session.optimizer_steps)
        self._pending.setdefault(id(module), []).append(info)

    def on_module_post(self, module: nn.Module, args: tuple, output: Any, top: bool) -> None:
        if not top:
            return
        stack = self._pending.get(id(module))
        if not stack:
            return
        info = stack.pop()
        if not info.grad_enabled:
            info.kind = "no-grad"
            self._evaluation_like(info)
            return
        nodes = [t.grad_fn for t in tensors_in(output, limit=4) if t.grad_fn is not None]
        if not nodes:
            return
        usage = _Usage(info, self)
        for node in nodes:
            node.register_prehook(usage)
        self._alive.add(usage)
        weakref.finalize(usage, self._freed, info)

    def _used(self, info: ForwardInfo) -> None:
        info.kind = "used"
        for listener in self.used_listeners:
            self.session._safely(listener, info)

    def _freed(self, info: ForwardInfo) -> None:
        if info.kind != "used" and not self.stopped:
            info.kind = "unused"
            self._evaluation_like(info)

    # ----------------------------------------------------------------- grouping
    def _evaluation_like(self, info: ForwardInfo) -> None:
        key = (info.model_id, info.steps_at)
        self._groups.setdefault(key, []).append(info)
        if len(self._groups) > 256:  # settle old groups so memory stays bounded on long runs
            for old in sorted(self._groups)[:128]:
                self._settle(old, final_steps=None)

    def _settle(self, key: tuple[int, int], final_steps: int | None) -> None:
        group = self._groups.pop(key)
        no_step_after = final_steps is not None and key[1] >= final_steps
        if len(group) >= 2 or no_step_after:
            for listener in self.evaluation_listeners:
                self.session._safely(listener, group)

    def finish(self) -> None:
        # Graphs still alive at the end were never used by a backward pass (unless the script crashed).
        if not self.session.script_failed:
            for usage in list(self._alive):
                if not usage.used and usage.info.kind == "":
                    usage.info.kind = "unused"
                    self._evaluation_like(usage.info)
        self.stopped = True
        final = self.session.optimizer_steps
        for key in sorted(self._groups):
            self._settle(key, final_steps=final)


def describe_forwards(group: list[ForwardInfo]) -> str:
    """'model(x) ran 12 times' style phrase for a group of forwards."""
    first = group[0]
    times = f"{len(group)} times" if len(group) > 1 else "once"
    return f"{first.name}(...) ran {times}"


def is_dropout_or_batchnorm(module: nn.Module) -> bool:
    return isinstance(module, _STOCHASTIC)


def optimizer_holds(optimizer: torch.optim.Optimizer, model: nn.Module) -> bool:
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    return any(id(p) in ids for p in model.parameters())
