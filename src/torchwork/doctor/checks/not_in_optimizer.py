"""not-in-optimizer: a parameter receives gradients but belongs to no optimizer's groups (by identity).

Typical cause: layers unfrozen after the optimizer was built and never added to it (or added by value,
which picks an equal-looking tensor: Lightning's ``BackboneFinetuning`` did), or a layer replaced after
the optimizer was created. Its gradients are computed every step and thrown away. Parameters are
matched by identity against every optimizer of the session, checked at the end, so a GAN's two
optimizers each holding half of the parameters is not a finding.
"""

from __future__ import annotations

from typing import Any

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import optimizer_holds


class NotInOptimizer(Check, id="not-in-optimizer", severity="warning"):
    def setup(self) -> None:
        self.held: set[int] = set()  # ids of every parameter any optimizer held at any step
        # id(param) -> (its name, where the step was, optimizer class)
        self.candidates: dict[int, tuple[str, tuple[str, int] | None, str]] = {}

    def on_step_pre(self, optimizer: Any) -> None:
        for group in optimizer.param_groups:
            for param in group["params"]:
                self.held.add(id(param))
        where = None
        for model in self.session.models_seen():
            if not optimizer_holds(optimizer, model):
                continue
            for name, param in model.named_parameters():
                pid = id(param)
                if param.grad is None or not param.requires_grad or pid in self.held or pid in self.candidates:
                    continue
                if where is None:
                    where = self.session.where()
                label = f"{type(model).__name__}.{name}"
                self.candidates[pid] = (label, where, type(optimizer).__name__)

    def finish(self) -> None:
        by_step: dict[tuple[Any, str], list[str]] = {}
        for pid, (label, where, optimizer) in self.candidates.items():
            if pid in self.held:
                continue
            by_step.setdefault((where, optimizer), []).append(label)
        for (where, optimizer), labels in by_step.items():
            shown = ", ".join(labels[:4]) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
            self.report(
                f"{len(labels)} parameter tensor(s) received gradients at {optimizer}.step() but belong to no "
                f"optimizer (matched by identity): {shown}. Their gradients are computed and thrown away; "
                "they never change. Layers unfrozen after the optimizer was built (requires_grad_(True)) and "
                "never added to it, or a layer replaced after the optimizer was created, look like this.",
                "Add them by identity with their learning rate: optimizer.add_param_group({'params': [...], "
                "'lr': ...}) (torchwork.finetune.GradualUnfreezing does it and keeps the scheduler in step), "
                "build the optimizer after replacing layers, or freeze them with requires_grad_(False).",
                where=where)
