"""requires-grad-attribute: ``module.requires_grad = False`` freezes nothing.

``requires_grad`` is a property of tensors. Assigned on an ``nn.Module`` it becomes a plain attribute of
that object: every parameter keeps ``requires_grad=True``, stays in the optimizer and keeps training. The
check sees the assignment (a thin wrapper of ``nn.Module.__setattr__``) and reports it at its line with the
parameters that still train: at the first optimizer step that updates them, or when the script ends if
they received gradients (not when they were frozen some other way meanwhile). Only assignments made by
the user's code count: a library's own ``requires_grad`` flag on its modules is its business.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check


class RequiresGradAttribute(Check, id="requires-grad-attribute", severity="error"):
    def setup(self) -> None:
        # (the module, its name when assigned, where) for each `module.requires_grad = False`
        self.assigned: list[tuple[weakref.ReferenceType[torch.nn.Module], str, tuple[str, int] | None]] = []

    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def setattr_(module: torch.nn.Module, name: str, value: Any) -> None:
                if (name == "requires_grad" and value is False and len(check.assigned) < 16
                        and check.session.locator.is_user_file(sys._getframe(1).f_code.co_filename)):
                    check.assigned.append((weakref.ref(module), type(module).__name__, check.session.where()))
                original(module, name, value)
            return setattr_

        self.session.patch(torch.nn.Module, "__setattr__", make)

    def on_step_pre(self, optimizer: Any) -> None:
        if not self.assigned:
            return
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for entry in list(self.assigned):
            module = entry[0]()
            if module is not None and any(id(p) in held and p.grad is not None for p in module.parameters()):
                self._conclude(entry, stepping=type(optimizer).__name__)

    def finish(self) -> None:
        for entry in list(self.assigned):
            self._conclude(entry)

    def _conclude(self, entry: tuple[weakref.ReferenceType[torch.nn.Module], str, tuple[str, int] | None],
                  stepping: str = "") -> None:
        self.assigned.remove(entry)
        ref, label, where = entry
        module = ref()
        if module is not None:
            training = [name for name, p in module.named_parameters() if p.requires_grad]
            changed = [name for name, p in module.named_parameters() if p.requires_grad and p.grad is not None]
            if not changed:  # frozen some other way, or never trained: nothing went wrong
                return
            shown = ", ".join(training[:4]) + (f" and {len(training) - 4} more" if len(training) > 4 else "")
            trained = f" {len(changed)} of them received gradients" + (f" and {stepping}.step() updates them."
                                                                         if stepping else ".")
            self.report(
                f"`requires_grad = False` on a {label} (an nn.Module) sets a plain attribute and freezes nothing: "
                f"its {len(training)} parameter tensor(s) ({shown}) still have requires_grad=True and keep "
                f"training.{trained}",
                "Freeze the parameters, not the module: module.requires_grad_(False) (note the underscore), or "
                "`for p in module.parameters(): p.requires_grad = False`; then build the optimizer from the "
                "parameters that still require grad.", where=where)
