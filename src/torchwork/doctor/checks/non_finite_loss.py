"""non-finite-loss: a NaN/Inf loss, with the first operation that produced a non-finite value.

Every float result of the torch API is checked with one reduction (a sum is finite only when every
element is). Results of ``empty*`` are skipped: they are uninitialised memory, not NaNs. Operations that
produce infinities on purpose (``masked_fill(mask, -inf)`` before a softmax) are recognised because they
did so while the loss was still finite, and are not blamed.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where
from torchwork.doctor.session import is_finite_fast

Tensor = torch.Tensor


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    module = getattr(func, "__module__", None) or ""
    if module.startswith("torch.nn.functional"):
        return f"F.{name}"
    if getattr(func, "__objclass__", None) is not None or type(func).__name__ in ("method_descriptor",
                                                                                   "wrapper_descriptor"):
        return f"Tensor.{name}"
    return f"torch.{name}"


def _inputs(args: tuple) -> list[Tensor]:
    found = []
    for arg in args:
        if isinstance(arg, Tensor):
            found.append(arg)
        elif isinstance(arg, (list, tuple)):
            found.extend(a for a in arg[:8] if isinstance(a, Tensor))
    return found


class NonFiniteLoss(Check):
    id = "non-finite-loss"
    severity = "error"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.events: list[tuple[str, str, tuple[str, int] | None]] = []  # (kind, op, where) this step
        self.benign: set[tuple[str, int] | None] = set()
        self.done = False

    def on_values(self, func: Any, args: tuple, out: Any) -> None:
        if isinstance(out, Tensor):
            outputs = (out,)
        elif isinstance(out, (tuple, list)) and out and isinstance(out[0], Tensor):
            outputs = tuple(o for o in out[:8] if isinstance(o, Tensor))
        else:
            return
        for tensor in outputs:
            if tensor.is_floating_point() and not is_finite_fast(tensor):
                break
        else:
            return
        if len(self.events) >= 32:
            return
        where = self.session.where()
        if where in self.benign:
            return
        entered = any(t.is_floating_point() and not is_finite_fast(t) for t in _inputs(args))
        self.events.append(("entered" if entered else "produced", _op_name(func), where))

    def on_backward_pre(self, tensor: Any) -> None:
        if self.done or not isinstance(tensor, Tensor) or not tensor.is_floating_point():
            return
        if tensor.numel() == 1 and math.isfinite(float(tensor.detach())):
            self.benign.update(where for _, _, where in self.events)
            self.events.clear()
            return
        if tensor.numel() != 1 and is_finite_fast(tensor):
            self.events.clear()
            return
        self._report(tensor)

    def _report(self, loss: Tensor) -> None:
        self.done = True
        value = float(loss.detach().reshape(-1)[0]) if loss.numel() else float("nan")
        step = self.session.optimizer_steps + 1
        backward_at = self.session.where()
        where_text = format_where(backward_at, "the backward call")
        produced = [e for e in self.events if e[0] == "produced"]
        if produced:
            _, op, where = produced[0]
            message = (f"The loss was {value} at optimizer step {step} (backward at {where_text}). The first "
                       f"non-finite value in that step came from {op} on this line, with finite inputs.")
            fix = ("Make that operation safe: clamp before log/sqrt/pow (x.clamp_min(1e-12)), add an epsilon "
                   "to denominators, use logsumexp / log_softmax / BCEWithLogitsLoss instead of exp+log.")
        elif self.events:
            _, op, where = self.events[0]
            message = (f"The loss was {value} at optimizer step {step} (backward at {where_text}). The inputs of "
                       f"{op} on this line were already non-finite: the batch holds NaN/Inf values, or an "
                       "earlier optimizer step made the weights non-finite (learning rate too high).")
            fix = ("Check the data (torch.isfinite(x).all()) and normalise it; if the weights blew up, lower "
                   "the learning rate, clip gradients (torch.nn.utils.clip_grad_norm_), or warm up.")
        else:
            where = backward_at
            message = (f"The loss was {value} at optimizer step {step}: no operation seen by the doctor produced "
                       "the non-finite value first (it may come from a custom kernel or from the data).")
            fix = ("Check the data and the loss inputs for NaN/Inf; lower the learning rate; clip gradients; "
                   "use numerically stable losses (BCEWithLogitsLoss, log_softmax).")
        self.report(message, fix, where=where)
        self.session.stop_values(self.on_values)
