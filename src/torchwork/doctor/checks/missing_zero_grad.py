"""missing-zero-grad: an optimizer steps with gradients still accumulated from before its previous step.

Deliberate accumulation (zero_grad every k steps... and step every k backward passes) is not a finding:
what matters is whether ``.grad`` was cleared at some point between two steps of the same optimizer.
A closure's gradients (``LBFGS.step(closure)``) arrive inside the step, after its start: they are judged when
the step ends (a closure that never clears adds each evaluation to the previous step's gradients).

Without an optimizer (``p.data.add_(p.grad, alpha=-lr)`` by hand, as pytorch/examples' regression and
word_language_model do): the parameters of the first backward passes are watched; a gradient that arrives on
an uncleared ``.grad`` after the parameter was changed in place is stale, and the next in-place update of
that parameter, which uses it, is the finding's line.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check

_WATCHED_BACKWARDS = 2  # the backward passes whose parameters are watched for updates by hand


class _HandUpdated:
    """One parameter's story between backward passes: changed in place since its .grad was last clean?"""

    __slots__ = ("param", "updated", "stale", "handle")

    def __init__(self, param: torch.Tensor) -> None:
        self.param = weakref.ref(param)
        self.updated = False  # changed in place since a gradient last arrived on a clean .grad
        self.stale = False  # .grad now sums gradients from before and after such a change
        self.handle = param.register_hook(self)

    def __call__(self, grad: torch.Tensor) -> None:
        param = self.param()
        current = None if param is None else param.grad
        if current is None or not bool(current.any()):
            self.updated = self.stale = False
        elif self.updated:
            self.stale = True


def _leaf_parameters(tensor: Any) -> list[torch.Tensor]:
    """The leaves requiring grad that a backward from ``tensor`` reaches (its AccumulateGrad nodes)."""
    found, seen, todo = [], set(), [getattr(tensor, "grad_fn", None)]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(variable)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return found


def _storage_key(tensor: torch.Tensor) -> int | None:
    """The address of the tensor's memory (shared by ``p`` and ``p.data``), or None for a tensor without
    storage of its own (a DTensor of tensor parallelism, another wrapper subclass, a fake tensor)."""
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return None


class MissingZeroGrad(Check, id="missing-zero-grad", severity="error", requires=("grads",)):
    def setup(self) -> None:
        self.started: dict[int, tuple[int, list[int]]] = {}  # optimizer -> (its steps, arrivals) at step()
        self.by_hand: dict[int, _HandUpdated] = {}  # parameter storage -> its record (no optimizer involved)
        self.watched = 0
        self.reported_in = -1

    def on_backward_pre(self, tensor: Any) -> None:
        if self.watched >= _WATCHED_BACKWARDS or self.session.optimizer_steps:
            return
        self.watched += 1
        for param in _leaf_parameters(tensor):
            key = _storage_key(param)
            if key is not None and key not in self.by_hand:
                self.by_hand[key] = _HandUpdated(param)

    def on_inplace(self, func: Any, tensor: Any) -> None:
        if not self.by_hand:
            return
        key = _storage_key(tensor)
        record = self.by_hand.get(key) if key is not None else None
        if record is None:
            return
        if record.stale and self.reported_in != self.session.backward_calls:
            self.reported_in = self.session.backward_calls  # one finding per update, not one per parameter
            record.stale = False
            self.report(
                "A parameter was updated by hand with a gradient that still held the gradient of the previous "
                "update: .grad was never cleared between two backward passes with an in-place update in "
                "between, so each update uses the sum of all past gradients and training diverges or stalls.",
                "Clear the gradients once per step before loss.backward(): model.zero_grad() (or p.grad = None "
                "for each parameter), or use an optimizer: torch.optim.SGD(model.parameters(), lr).")
        record.updated = True

    def uninstall(self) -> None:
        for record in self.by_hand.values():
            record.handle.remove()
        self.by_hand.clear()

    def on_step_pre(self, optimizer: Any) -> None:
        rec = self.helper("grads").record(optimizer)
        self.started[id(optimizer)] = (rec.steps, [p.arrivals for p in rec.params])
        if rec.steps == 0:
            return
        stale = [p for p in rec.params if p.interval == rec.steps and not p.clean]
        self._stale(optimizer, rec.steps + 1, len(rec.params), stale, "")

    def on_step_post(self, optimizer: Any) -> None:
        if self.by_hand:  # an optimizer updates the parameters: the hand-update watch ends
            self.watched = _WATCHED_BACKWARDS
            self.uninstall()
        steps, arrivals = self.started.pop(id(optimizer), (0, []))
        if steps == 0:
            return
        rec = self.helper("grads").record(optimizer)
        stale = [p for p, before in zip(rec.params, arrivals) if p.arrivals > before and p.interval == steps
                 and not p.clean]
        self._stale(optimizer, steps + 1, len(rec.params), stale, " (their backward ran in the step's closure)")

    def _stale(self, optimizer: Any, number: int, params: int, stale: list[Any], how: str) -> None:
        if not stale:
            return
        self.report(
            f"{type(optimizer).__name__}.step() (step {number}) used gradients that still held the "
            f"previous steps' gradients{how}: {len(stale)} of {params} parameter tensors were never "
            "cleared since the last step. Each update then uses the sum of all past gradients, so training "
            "diverges or stalls.",
            "Call optimizer.zero_grad() once per step (before loss.backward()). For gradient accumulation, "
            "zero after each optimizer.step(), not before every backward().")
