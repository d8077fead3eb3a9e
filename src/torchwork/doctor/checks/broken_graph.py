"""broken-graph: trainable parameters that never receive a gradient, and where the chain broke.

After the first optimizer step the check knows which parameters got no gradient. From then on it watches
the operations that hand values out of autograd (``.detach()``, ``.data``, ``.item()``, ``float()``,
``.numpy()``, ``.tolist()``, ``torch.tensor(t)``) and modules running under ``no_grad``; a break is blamed
when the graph behind it reaches the missing parameters and the loss's graph does not. Of several such
breaks (a GAN detaches its fakes for the discriminator's step, rightly, and again for the generator's loss,
wrongly), the one made just before the last backward pass ahead of the starved optimizer's step is blamed:
that loss term is the one that should have reached it. A loss that is a leaf (``loss.requires_grad = True``
hiding a break) is reported at the backward call.

The graph walk is :mod:`torchwork.inspect.walk`'s, shared with ``torchwork graph``, which draws the graph
and names every unreached parameter with its reason.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where
from torchwork.inspect.walk import CUT_LABELS, reached_leaves

_MAX_NODES = 20000  # bounded walks: the check runs on every backward of a long training script
_SEE_GRAPH = "`torchwork graph SCRIPT.py` draws the graph of the first backward() and names each cut parameter."


class BrokenGraph(Check):
    id = "broken-graph"
    severity = "error"
    requires = ("grads",)

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.missing: dict[int, str] = {}  # id(param) -> name, for params with no gradient so far
        # (label, where, params reached, backward passes before it)
        self.breaks: list[tuple[str, tuple[str, int] | None, set[int], int]] = []
        self.backward_at: dict[int, tuple[str, int] | None] = {}  # backward pass number -> its line
        # id(param) -> (optimizer class, where it stepped, backward passes before that step)
        self.starved: dict[int, tuple[str, tuple[str, int] | None, int]] = {}
        self.starved_steps: set[int] = set()  # backward passes before each step of a starved optimizer
        self.no_grad_modules: list[tuple[str, tuple[str, int] | None, set[int]]] = []
        self.loss_reached: set[int] = set()
        self.first_step_where: tuple[str, int] | None = None
        self.armed = False

    # ----------------------------------------------------------------- which parameters are missing
    def _names(self) -> dict[int, str]:
        names: dict[int, str] = {}
        for item in self.session.models_seen():
            for name, param in item.named_parameters():
                names.setdefault(id(param), f"{type(item).__name__}.{name}")
        return names

    def on_step_pre(self, optimizer: Any) -> None:
        rec = self.helper("grads").record(optimizer)
        if self.first_step_where is None:
            self.first_step_where = self.session.where()
        missing = [p for p in rec.params if not p.received and p.param() is not None]
        if missing and not self.armed:
            names = self._names()
            for prec in missing:
                param = prec.param()
                self.missing[id(param)] = names.get(id(param), f"a {tuple(param.shape)} parameter")
            self.armed = True
            self.session.arm_break_tracking(self.on_break)
        for pid in [pid for pid in self.missing if self._received(pid)]:
            del self.missing[pid]
        if self.armed:
            held = {id(prec.param()) for prec in rec.params if prec.param() is not None}
            starved = held & set(self.missing)
            for pid in starved:
                self.starved.setdefault(pid, (type(optimizer).__name__, self.session.where(),
                                              self.session.backward_calls))
            if starved and len(self.starved_steps) < 256:
                self.starved_steps.add(self.session.backward_calls)

    def _received(self, pid: int) -> bool:
        for rec in self.helper("grads").optimizers.values():
            for prec in rec.params:
                param = prec.param()
                if param is not None and id(param) == pid:
                    return prec.received
        return False

    # ----------------------------------------------------------------- where the chain breaks
    def on_break(self, func: Any, tensor: torch.Tensor) -> None:
        if not self.missing or not tensor.requires_grad or len(self.breaks) >= 16:
            return
        name = getattr(func, "__name__", "") or ""
        if name == "__get__":
            name = getattr(getattr(func, "__self__", None), "__name__", name)
        reached = reached_leaves(tensor, set(self.missing), _MAX_NODES) & set(self.missing)
        if reached:
            self.breaks.append((CUT_LABELS.get(name, name), self.session.where(), reached,
                                self.session.backward_calls))

    def on_module_pre(self, module: Any, args: tuple, kwargs: dict, top: bool) -> None:
        if not self.armed or not self.missing or torch.is_grad_enabled() or len(self.no_grad_modules) >= 8:
            return
        own = {id(p) for p in module.parameters(recurse=False)} & set(self.missing)
        if own:
            self.no_grad_modules.append((self.session.module_name(module), self.session.where(), own))

    def on_backward_pre(self, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor):
            return
        if tensor.requires_grad and tensor.grad_fn is None:
            self.report(
                "backward() was called on a leaf tensor (a tensor with requires_grad=True but no history): "
                "the loss was rebuilt from plain numbers (e.g. torch.tensor(loss.item(), requires_grad=True) "
                "or loss.requires_grad = True), so no gradient reaches the model.",
                "Compute the loss from the model's output with tensor operations only; remove the "
                "requires_grad=True workaround and the .item()/.detach()/torch.tensor(...) that broke the chain.")
        if self.armed and self.missing:
            self.loss_reached |= reached_leaves(tensor, set(self.missing), _MAX_NODES)
            if len(self.backward_at) < 64:
                self.backward_at[self.session.backward_calls + 1] = self.session.where()

    # ----------------------------------------------------------------- conclusion
    def finish(self) -> None:
        missing = {pid: name for pid, name in self.missing.items()
                   if pid not in self.loss_reached and not self._received(pid)}
        for label, where, reached, term in sorted(self.breaks, key=self._blame_order):
            cut = {pid: missing.pop(pid) for pid in reached & set(missing)}  # one finding per cause
            if cut:
                self.report(f"{_head(cut)}: the graph is cut here by {label}; everything computed from its "
                            f"result is a constant for autograd.{self._starved_text(cut, term)}",
                            f"Keep tensors in the graph: drop {label} on the path from the model to the loss "
                            "(use it only for logging/metrics, after the loss is computed). " + _SEE_GRAPH, where=where)
        for name, where, reached in self.no_grad_modules:
            cut = {pid: missing.pop(pid) for pid in reached & set(missing)}
            if cut:
                self.report(f"{_head(cut)}: {name} ran under torch.no_grad()/inference_mode, so autograd "
                            "recorded nothing for it.",
                            "Run the trainable part of the forward pass with autograd on; if the layer is "
                            "meant to be frozen, set requires_grad_(False) on it and leave it out of the "
                            "optimizer. " + _SEE_GRAPH, where=where, severity="warning")
        if missing:
            self.report(f"{_head(missing)}: they are in the optimizer but never took part in a loss (an unused "
                        "layer or output head, or a branch never executed).",
                        "Use the layer in forward(), or freeze it (requires_grad_(False)) and leave it out of "
                        "the optimizer; under DDP unused parameters also stall training. " + _SEE_GRAPH,
                        where=self.first_step_where, severity="warning")


    def _blame_order(self, cut: tuple[str, Any, set[int], int]) -> tuple[int, int]:
        """Breaks feeding the last backward pass before a starved optimizer's step first, then in order."""
        _, _, reached, before = cut
        feeds_last = before + 1 in self.starved_steps and bool(reached & set(self.starved))
        return (0 if feeds_last else 1, self.breaks.index(cut))

    def _starved_text(self, cut: dict[int, str], before: int) -> str:
        starved = [self.starved[pid] for pid in cut if pid in self.starved]
        if not starved:
            return ""
        optimizer, step_at, _ = starved[0]
        term = self.backward_at.get(before + 1) if before + 1 in self.starved_steps else None
        loss = f"The loss term backpropagated at {format_where(term)}" if term else "The next loss"
        return (f" {loss} was computed from that result, so it sent nothing to these parameters, and "
                f"{optimizer}.step() at {format_where(step_at)}, which holds them, stepped on no gradient.")


def _head(params: dict[int, str]) -> str:
    names = sorted(params.values())
    listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{len(names)} trainable parameter tensor(s) never received a gradient ({listed})"
