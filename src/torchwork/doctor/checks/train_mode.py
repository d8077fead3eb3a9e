"""train-mode: optimizer steps computed from a forward pass in eval mode (Dropout/BatchNorm inactive).

Only the whole model in eval mode counts: freezing BatchNorm on purpose (``model.train()`` then
``bn.eval()`` on those layers) is not a finding.
"""

from __future__ import annotations

from typing import Any

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import ForwardInfo, optimizer_holds


class TrainMode(Check, id="train-mode", severity="warning", requires=("forwards",)):
    def setup(self) -> None:
        self.pending: list[ForwardInfo] = []

    def install(self) -> None:
        self.helper("forwards").used_listeners.append(self.on_used)

    def on_used(self, info: ForwardInfo) -> None:
        if not info.training and info.layer_count and len(self.pending) < 64:
            self.pending.append(info)

    def on_step_pre(self, optimizer: Any) -> None:
        pending, self.pending = self.pending, []
        for info in pending:
            model = info.model()
            if model is None or not optimizer_holds(optimizer, model):
                continue
            self.report(
                f"{type(optimizer).__name__}.step() applied gradients from {info.name}(...), which ran in eval "
                f"mode: its {info.layer_count} Dropout/BatchNorm layer(s) were inactive during training "
                "(no dropout regularisation, BatchNorm frozen to its running statistics).",
                "Call model.train() before the training loop (and after every evaluation that called "
                "model.eval()). To freeze BatchNorm on purpose, call model.train() and then .eval() on those "
                "layers only.", where=info.where)
            return
