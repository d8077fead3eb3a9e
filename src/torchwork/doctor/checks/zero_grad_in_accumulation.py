"""zero-grad-in-accumulation: zero_grad() inside the micro-batch loop of gradient accumulation.

The optimizer steps every k backward passes, but its gradients are cleared between them, so each step
uses only the last micro-batch of its window. Seen as: between two steps of one optimizer, ``zero_grad``
cleared gradients that a backward pass had brought *since the last step*, and the gradients the step then
used came from the same backward call site (the same loop: the same chain of user frames). A GAN's
discriminator clearing the gradients that the generator's loss sent it is not a finding: those came from
another call site, even through one shared helper. Calls made inside
``optimizer.step()`` (an L-BFGS closure) and steps a GradScaler skipped are not windows.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._grads import user_call_chain
from torchwork.doctor.findings import format_where

Wipe = tuple[tuple[str, int] | None, int]  # (where zero_grad ran, the backward pass whose gradients it cleared)


class ZeroGradInAccumulation(Check, id="zero-grad-in-accumulation", severity="error", requires=("grads",)):
    def setup(self) -> None:
        self.wipes: dict[int, list[Wipe]] = {}  # id(optimizer record) -> wipes since its last step
        self.backward_at: dict[int, tuple[tuple[str, int], ...]] = {}  # backward pass number -> its user frames
        self.in_step = 0
        self.done = False

    def install(self) -> None:
        check = self

        def clears(owner_params: Any) -> Any:
            def make(original: Any) -> Any:
                def zero_grad(owner: Any, *args: Any, **kwargs: Any) -> Any:
                    if not check.done and not check.in_step:
                        check.session.safely(check.before_zero, owner_params(owner))
                    return original(owner, *args, **kwargs)
                return zero_grad
            return make

        self.session.patch(torch.optim.Optimizer, "zero_grad",
                           clears(lambda opt: [p for g in opt.param_groups for p in g["params"]]))
        self.session.patch(torch.nn.Module, "zero_grad", clears(lambda module: list(module.parameters())))

        def skipped_steps(original: Any) -> Any:
            def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
                before = check.session.optimizer_steps
                try:
                    return original(scaler, optimizer, *args, **kwargs)
                finally:
                    if check.session.optimizer_steps == before:  # skipped for inf/NaN: not a window
                        rec = check.helper("grads").optimizers.get(id(optimizer))
                        if rec is not None:
                            check.wipes.pop(id(rec), None)
            return step

        self.session.patch(torch.amp.GradScaler, "step", skipped_steps)

    def on_backward_pre(self, tensor: Any) -> None:
        if not self.done:
            number = self.session.backward_calls + 1
            self.backward_at[number] = user_call_chain(self.session.locator, sys._getframe(1))
            self.backward_at.pop(number - 256, None)  # a window longer than 256 backward passes is not judged

    def before_zero(self, params: list[torch.Tensor]) -> None:
        ids = {id(p) for p in params if p.grad is not None}
        if not ids:
            return
        where = None
        for rec in self.helper("grads").optimizers.values():
            for prec in rec.params:
                param = prec.param()
                if param is None or id(param) not in ids or prec.interval != rec.steps or prec.arrived_in < 0:
                    continue
                with torch._C.DisableTorchFunction():  # the doctor's own look, not the user's operation
                    empty = param.grad is None or not bool(param.grad.any())
                if empty:  # nothing accumulated: nothing lost
                    continue
                if where is None:
                    where = self.session.where()
                wipes = self.wipes.setdefault(id(rec), [])
                if len(wipes) < 64:
                    wipes.append((where, prec.arrived_in))
                break

    def on_step_pre(self, optimizer: Any) -> None:
        rec = self.helper("grads").record(optimizer)
        wipes = self.wipes.pop(id(rec), [])
        self.in_step += 1
        if self.done or not wipes or rec.steps == 0:
            return
        used = {self.backward_at.get(p.arrived_in) for p in rec.params if p.interval == rec.steps} - {None, ()}
        lost = [(where, n) for where, n in wipes if self.backward_at.get(n) in used]
        if not lost:
            return
        self.done = True
        where, n = lost[0]
        windows = len(lost) + 1
        self.report(
            f"{type(optimizer).__name__}.step() (step {rec.steps + 1}) ran after {windows} backward passes at "
            f"{format_where(self.backward_at[n][0])}, but zero_grad() here cleared the gradients of "
            f"{windows - 1} of them before the step: only the last micro-batch of each accumulation window "
            "reached the optimizer (the others were computed and thrown away, and the loss scaling by the "
            "number of micro-batches shrinks the step too).",
            "Clear the gradients once per optimizer step, right after optimizer.step() (or before the first "
            "micro-batch of each window), not inside the micro-batch loop: "
            "`if (i + 1) % k == 0: optimizer.step(); optimizer.zero_grad()`.", where=where)

    def on_step_post(self, optimizer: Any) -> None:
        self.in_step = max(0, self.in_step - 1)
        rec = self.helper("grads").optimizers.get(id(optimizer))
        if rec is not None:
            self.wipes.pop(id(rec), None)  # calls made inside step() (a closure) belong to no window
