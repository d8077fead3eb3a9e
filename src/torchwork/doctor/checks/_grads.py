"""Which parameters received gradients, and whether old gradients were still there.

One hook per trainable parameter of each optimizer (``Tensor.register_hook``, called just before a new
gradient is accumulated into ``.grad``) records, for the interval since that optimizer's last step,
whether a gradient arrived, from which backward pass, and whether ``.grad`` was clean (None or all zeros)
at some point when one arrived. The hooks are installed the first time an optimizer steps and removed when the session ends.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check


def user_call_chain(locator: Any, frame: types.FrameType | None) -> tuple[tuple[str, int], ...]:
    """The user's frames from ``frame`` outwards, innermost first (at most 8): where a backward pass ran from.
    One helper `step(loss, optimizer)` used by a GAN for both of its losses is two call chains, not one."""
    chain: list[tuple[str, int]] = []
    while frame is not None and len(chain) < 8:
        if locator.is_user_file(frame.f_code.co_filename):
            chain.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(chain)


class ParamRecord:
    __slots__ = ("param", "owner", "interval", "clean", "received", "handle", "arrived_in", "arrivals")

    def __init__(self, param: torch.Tensor, owner: OptimizerRecord) -> None:
        self.param = weakref.ref(param)
        self.owner = owner
        self.interval = -1  # the owner's step count when a gradient last arrived
        self.clean = True  # .grad was None/zero when a gradient arrived in that interval
        self.received = param.grad is not None
        self.handle: Any = None
        self.arrived_in = -1  # the session's number of the backward pass that brought the last gradient
        self.arrivals = 0  # gradients received so far (counted inside step() too, where a closure runs)

    def __call__(self, grad: torch.Tensor) -> None:
        steps = self.owner.steps
        self.received = True
        self.arrivals += 1
        self.arrived_in = self.owner.session.backward_calls
        param = self.param()
        current = None if param is None else param.grad
        is_clean = current is None or not bool(current.any())
        if self.interval != steps:
            self.interval, self.clean = steps, is_clean
        elif not self.clean:
            self.clean = is_clean


class OptimizerRecord:
    def __init__(self, optimizer: torch.optim.Optimizer, session: Any) -> None:
        self.session = session
        self.optimizer = weakref.ref(optimizer)
        self.steps = 0  # completed steps of this optimizer
        self.params: list[ParamRecord] = []


class GradTracker(Check):
    def setup(self) -> None:
        self.optimizers: dict[int, OptimizerRecord] = {}

    def record(self, optimizer: torch.optim.Optimizer) -> OptimizerRecord:
        rec = self.optimizers.get(id(optimizer))
        if rec is not None and rec.optimizer() is optimizer:
            return rec
        rec = OptimizerRecord(optimizer, self.session)
        for group in optimizer.param_groups:
            for param in group["params"]:
                if not param.requires_grad:
                    continue
                prec = ParamRecord(param, rec)
                prec.handle = param.register_hook(prec)
                rec.params.append(prec)
        self.optimizers[id(optimizer)] = rec
        return rec

    def on_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        self.record(optimizer)

    def on_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        self.record(optimizer).steps += 1

    def uninstall(self) -> None:
        for rec in self.optimizers.values():
            for prec in rec.params:
                if prec.handle is not None:
                    prec.handle.remove()
                    prec.handle = None
