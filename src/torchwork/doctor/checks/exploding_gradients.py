"""exploding-gradients: the gradient norm is non-finite, very large, or grows by orders of magnitude."""

from __future__ import annotations

import math
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.detectors import GradNormWatch, total_grad_norm

ABOVE_START = 10.0  # a norm over the absolute limit is exploding once it is 10x the run's first norms too


def grad_norm(optimizer: torch.optim.Optimizer) -> float:
    """Total L2 norm of the optimizer's gradients (one fused norm per tensor, one sync)."""
    norm = total_grad_norm([p for group in optimizer.param_groups for p in group["params"]])
    return 0.0 if norm is None else float(norm)


class ExplodingGradients(Check, id="exploding-gradients", severity="warning"):
    """One cause, one finding: NaN gradients right after a NaN loss are that loss's doing, not a second problem."""

    def setup(self) -> None:
        # the guard's detector and thresholds; the script's own scale (its first norms) sets what is large
        self.watch = GradNormWatch(absolute_over_start=ABOVE_START)
        self.done = False

    def on_step_pre(self, optimizer: Any) -> None:
        if self.done:
            return
        norm = grad_norm(optimizer)
        step = self.session.optimizer_steps + 1
        what = self.watch.verdict(norm, step, unit="optimizer step")
        if what is None or (not math.isfinite(norm) and self._same_cause_as_the_loss(step)):
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
