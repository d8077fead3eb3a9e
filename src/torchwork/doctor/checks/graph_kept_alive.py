"""graph-kept-alive: a running total built from losses keeps every step's autograd graph alive.

``total_loss += loss`` (instead of ``loss.item()``) makes ``total_loss`` a tensor whose history reaches
back through every step's loss: the graph of each step stays referenced, memory grows with the number of
steps, and on a GPU the run ends in "CUDA out of memory". The check marks each one-element sum that has
autograd history with the optimizer step it started in; when such a sum is carried two steps on and added to
again, it reports the line, how many steps its history spans, and the graph it holds (autograd
nodes, and the bytes of tensors still saved for backward).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check

Tensor = torch.Tensor
# a sum carried over one step is not yet a running total: a GAN that steps D between its two losses carries
# a shared term (log Z) into G's step once, and a running total shows itself by its second step anyway
MIN_SPAN = 2
_MARK = "_torchwork_total_since"  # attribute set on the running total: (optimizer step, line)
_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def _saved_attributes(node: Any) -> tuple[str, ...]:
    kind = type(node)
    names = _SAVED_NAMES.get(kind)
    if names is None:
        names = _SAVED_NAMES[kind] = tuple(a for a in dir(node) if a.startswith("_saved_"))
    return names


def graph_size(root: Any, limit: int = 20_000) -> tuple[int, int]:
    """(autograd nodes reachable from ``root``, bytes of distinct tensors they still save for backward)."""
    seen: set[int] = set()
    storages: dict[int, int] = {}
    stack = [root]
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for name in _saved_attributes(node):
            try:
                value = getattr(node, name)
            except Exception:  # freed by a backward pass: holds no memory any more
                continue
            for tensor in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(tensor, Tensor) and tensor.layout == torch.strided:
                    storage = tensor.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
        stack.extend(next_node for next_node, _ in getattr(node, "next_functions", ()))
    return len(seen), sum(storages.values())


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 1024:.0f} KB"


class GraphKeptAlive(Check, id="graph-kept-alive", severity="warning"):
    def setup(self) -> None:
        self.totals: dict[tuple[str, int] | None, tuple[weakref.ReferenceType[Tensor], int]] = {}
        self.measured: dict[tuple[str, int] | None, int] = {}  # line -> span (in steps) last measured at

    def on_add(self, func: Any, args: tuple, out: Any) -> None:
        if not isinstance(out, Tensor) or out.grad_fn is None or out.numel() != 1:
            return
        step = self.session.optimizer_steps
        since = None
        for operand in args[:2]:
            mark = getattr(operand, _MARK, None) if isinstance(operand, Tensor) else None
            if mark is not None and (since is None or mark[0] < since[0]):
                since = mark
        if since is None:
            setattr(out, _MARK, (step, self.session.where()))
            return
        if out is not args[0] or getattr(out, _MARK, None) is None:
            setattr(out, _MARK, since)
        if since[0] < step:
            self._carried(out, since, step)

    def _carried(self, total: Tensor, since: tuple[int, Any], step: int) -> None:
        where = self.session.where()
        self.totals[where] = (weakref.ref(total), since[0])
        span = step - since[0]
        if span < MIN_SPAN:
            return
        last = self.measured.get(where)
        if last is not None and span < 2 * last:  # measure again only when the history doubled
            return
        self.measured[where] = span
        self._report(where, total, since[0], step)

    def _report(self, where: Any, total: Tensor, first_step: int, step: int) -> None:
        guard = self.session.check("inplace-saved")
        if guard is not None:
            guard.paused = True  # reading saved tensors must not count as using them in backward
        try:
            nodes, size = graph_size(total.grad_fn)
        finally:
            if guard is not None:
                guard.paused = False
        held = f"{nodes} autograd nodes" + (f" holding {_megabytes(size)} of saved tensors" if size else "")
        message = (f"A running total with autograd history is carried across optimizer steps: the sum here holds "
                   f"the history of {step - first_step + 1} steps and keeps {held} alive; it "
                   "grows every step, so memory grows until the run ends (on a GPU: CUDA out of memory).")
        fix = ("Accumulate plain numbers: total_loss += loss.item() (or loss.detach()); keep only the current "
               "step's loss as a tensor for backward().")
        finding = self.report(message, fix, where=where)
        finding.message = message  # a later, larger measurement replaces the first
        finding.count = 1

    def finish(self) -> None:
        for where, (ref, first_step) in list(self.totals.items()):
            total = ref()
            if total is not None and total.grad_fn is not None and self.measured.get(where) is not None:
                self._report(where, total, first_step, self.session.optimizer_steps)
