"""inference-grad: evaluation forward passes that build an autograd graph no backward pass uses.

One evaluation loop, one finding: when the same loop also ran in training mode (eval-mode's finding at
the same line), this check adds its cause and fix to that finding instead of reporting a second one.

A few example predictions (a tutorial's demo of an LSTM on 5 one-row steps, 3 sentences printed before and
after training) keep graphs of a handful of rows, freed at once: fewer than a batch's worth of rows
(``ONE_OFF_ROWS``) altogether is not worth a finding. Generation is always one (its graph grows with every
token), and so is a loop whose inputs are not tensors (their rows are unknown).
"""

from __future__ import annotations

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import ONE_OFF_ROWS, ForwardInfo, describe_forwards, evaluation_site
from torchwork.doctor.findings import display_path


class InferenceGrad(Check, id="inference-grad", severity="warning", requires=("forwards",)):
    def install(self) -> None:
        self.helper("forwards").evaluation_listeners.append(self.on_evaluation)

    def on_evaluation(self, group: list[ForwardInfo]) -> None:
        unused = [info for info in group if info.kind == "unused"]
        if not unused:
            return
        mode = "in eval mode " if not unused[0].training else ""
        where, generator = evaluation_site(unused)
        if generator is None and _few_rows(unused):
            return
        same_loop = [f for f in self.session.find("eval-mode") if where is not None
                     and (f.file, f.line) == (display_path(where[0]), where[1])]
        if same_loop:
            finding = same_loop[0]
            if "autograd recording" not in finding.message and generator is None:
                finding.message += (" The same forward passes also ran with autograd recording, and no backward "
                                    "pass used those graphs (memory and time spent for nothing).")
                finding.fix += " Wrap the loop in `with torch.inference_mode():` (or torch.no_grad())."
            return
        what = (f"{generator}(...), called here, generated with {unused[0].name}(...) {len(unused)} times"
                if generator is not None else describe_forwards(unused))
        self.report(
            f"{what} {mode}with autograd recording, and no backward pass ever used those "
            "graphs: every activation was kept for nothing (memory, and time to record the graph).",
            "Wrap evaluation and prediction in `with torch.inference_mode():` (or torch.no_grad()).",
            where=where)


def _few_rows(group: list[ForwardInfo]) -> bool:
    """Whether the forwards saw fewer rows than a batch's worth altogether (each one's rows known)."""
    return all(info.rows > 0 for info in group) and sum(info.rows for info in group) < ONE_OFF_ROWS
