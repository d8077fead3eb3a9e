"""exploding-gradients: the gradient norm is non-finite, very large, or grows by orders of magnitude."""

from __future__ import annotations

import math
import statistics
from typing import Any

import torch

from torchwork.doctor.checks import Check


def grad_norm(optimizer: torch.optim.Optimizer) -> float:
    """Total L2 norm of the optimizer's gradients (one fused norm per tensor, one sync)."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"]
             if p.grad is not None and not p.grad.is_sparse]
    if not grads:
        return 0.0
    norms = torch._foreach_norm(grads) if hasattr(torch, "_foreach_norm") else [g.norm() for g in grads]
    return float(torch.linalg.vector_norm(torch.stack([n.float().to(norms[0].device) for n in norms])))


class ExplodingGradients(Check):
    """One cause, one finding: NaN gradients right after a NaN loss are that loss's doing, not a second problem."""

    id = "exploding-gradients"
    severity = "warning"
    ratio = 1e3  # growth over the first steps' median that counts as exploding
    absolute = 1e5  # a total norm this large is exploding whatever the start

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.early: list[float] = []
        self.done = False

    def on_step_pre(self, optimizer: Any) -> None:
        if self.done:
            return
        norm = grad_norm(optimizer)
        step = self.session.optimizer_steps + 1
        if len(self.early) < 5 and math.isfinite(norm) and norm > 0:
            self.early.append(norm)
        baseline = statistics.median(self.early) if self.early else None
        if not math.isfinite(norm):
            if self._same_cause_as_the_loss(step):
                return
            what = f"The gradient norm was {norm} at optimizer step {step}: some gradients are NaN/Inf."
        elif norm > self.absolute:
            what = f"The gradient norm reached {norm:.3g} at optimizer step {step}"
            what += f" (typical at the start: {baseline:.3g})." if baseline else "."
        elif baseline and len(self.early) >= 3 and norm > self.ratio * baseline and norm > 10:
            what = (f"The gradient norm grew to {norm:.3g} at optimizer step {step}, {norm / baseline:.0f}x its "
                    f"value at the start ({baseline:.3g}).")
        else:
            return
        self.done = True
        self.report(what + " Updates this large throw the weights far away; the loss usually turns NaN next.",
                    "Lower the learning rate, clip gradients before optimizer.step() "
                    "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)), normalise inputs and targets, "
                    "and check the loss scale (sum vs mean reduction).")

    def _same_cause_as_the_loss(self, step: int) -> bool:
        losses = self.session.find("non-finite-loss")
        if not losses:
            return False
        self.done = True  # checked once: this is the first non-finite norm
        losses[0].message += f" The gradients of step {step} were NaN/Inf too (a consequence, not a second problem)."
        return True
