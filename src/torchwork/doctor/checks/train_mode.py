"""train-mode: optimizer steps computed from a forward pass in eval mode (Dropout/BatchNorm inactive).

Only the whole model in eval mode counts: freezing BatchNorm on purpose (``model.train()`` then
``bn.eval()`` on those layers) is not a finding.

The finding is at the training forward (where ``model.train()`` belongs: at the start of each epoch) and
names the call that left the model in eval mode when the doctor saw one: an evaluation's ``model.eval()``
with no ``model.train()`` after it, or a ``from_pretrained`` call (it returns the model in eval mode).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import ForwardInfo, optimizer_holds
from torchwork.doctor.findings import format_where

Where = tuple[str, int] | None


class TrainMode(Check, id="train-mode", severity="warning", requires=("forwards",)):
    def setup(self) -> None:
        self.pending: list[ForwardInfo] = []
        # id(module) -> (the module, where the user's call switched it to eval mode): the outermost calls only
        self.switched_off: dict[int, tuple[weakref.ReferenceType[torch.nn.Module], Where]] = {}
        self.depth = 0

    def install(self) -> None:
        self.helper("forwards").used_listeners.append(self.on_used)
        check = self

        def remembers(original: Any) -> Any:
            def train(module: Any, mode: bool = True) -> Any:
                check.depth += 1
                try:
                    return original(module, mode)
                finally:
                    check.depth -= 1
                    if check.depth == 0:
                        check.session.safely(check.switched, module, mode)
            return train

        self.session.patch(torch.nn.Module, "train", remembers)

    def switched(self, module: torch.nn.Module, mode: bool) -> None:
        if mode:
            self.switched_off.pop(id(module), None)
        elif len(self.switched_off) < 256:
            self.switched_off[id(module)] = (weakref.ref(module), self.session.where())

    def eval_call_of(self, model: torch.nn.Module) -> Where:
        """Where the user's call left ``model`` (or a module holding it) in eval mode, if one was seen."""
        for ref, where in reversed(self.switched_off.values()):
            owner = ref()
            if owner is not None and not owner.training and (owner is model or
                                                              any(m is model for m in owner.modules())):
                return where
        return None

    def on_used(self, info: ForwardInfo) -> None:
        if not info.training and info.layer_count and len(self.pending) < 64:
            self.pending.append(info)

    def on_step_pre(self, optimizer: Any) -> None:
        pending, self.pending = self.pending, []
        for info in pending:
            model = info.model()
            if model is None or not optimizer_holds(optimizer, model):
                continue
            cause = self.eval_call_of(model)
            switched = (f" since the call at {format_where(cause)} switched it to eval mode, and nothing switched "
                        "it back" if cause else "")
            self.report(
                f"{type(optimizer).__name__}.step() applied gradients from {info.name}(...), which ran in eval "
                f"mode{switched}: its {info.layer_count} Dropout/BatchNorm layer(s) were inactive during "
                "training (no dropout regularisation, BatchNorm frozen to its running statistics).",
                "Call model.train() at the start of each training epoch, before its first forward (an evaluation "
                "that calls model.eval() leaves the model there; so does from_pretrained). To freeze BatchNorm "
                "on purpose, call model.train() and then .eval() on those layers only.", where=info.where)
            return
