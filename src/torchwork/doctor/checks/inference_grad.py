"""inference-grad: evaluation forward passes that build an autograd graph no backward pass uses."""

from __future__ import annotations

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import ForwardInfo, describe_forwards


class InferenceGrad(Check):
    id = "inference-grad"
    severity = "warning"
    requires = ("forwards",)

    def install(self) -> None:
        self.helper("forwards").evaluation_listeners.append(self.on_evaluation)

    def on_evaluation(self, group: list[ForwardInfo]) -> None:
        unused = [info for info in group if info.kind == "unused"]
        if not unused:
            return
        mode = "in eval mode " if not unused[0].training else ""
        self.report(
            f"{describe_forwards(unused)} {mode}with autograd recording, and no backward pass ever used those "
            "graphs: every activation was kept for nothing (memory, and time to record the graph).",
            "Wrap evaluation and prediction in `with torch.inference_mode():` (or torch.no_grad()).",
            where=unused[0].where)
