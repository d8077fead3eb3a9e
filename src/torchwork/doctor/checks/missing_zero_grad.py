"""missing-zero-grad: an optimizer steps with gradients still accumulated from before its previous step.

Deliberate accumulation (zero_grad every k steps... and step every k backward passes) is not a finding:
what matters is whether ``.grad`` was cleared at some point between two steps of the same optimizer.
"""

from __future__ import annotations

from typing import Any

from torchwork.doctor.checks import Check


class MissingZeroGrad(Check):
    id = "missing-zero-grad"
    severity = "error"
    requires = ("grads",)

    def on_step_pre(self, optimizer: Any) -> None:
        rec = self.helper("grads").record(optimizer)
        if rec.steps == 0:
            return
        stale = [p for p in rec.params if p.interval == rec.steps and not p.clean]
        if not stale:
            return
        self.report(
            f"{type(optimizer).__name__}.step() (step {rec.steps + 1}) used gradients that still held the "
            f"previous steps' gradients: {len(stale)} of {len(rec.params)} parameter tensors were never "
            "cleared since the last step. Each update then uses the sum of all past gradients, so training "
            "diverges or stalls.",
            "Call optimizer.zero_grad() once per step (before loss.backward()). For gradient accumulation, "
            "zero after each optimizer.step(), not before every backward().")
