"""eval-mode: Dropout/BatchNorm left in training mode while the model is evaluated.

Evaluation is recognised from what the script does, not from names: forward passes under
``no_grad``/``inference_mode``, or whose graph no backward pass ever used, that come in a run of two or
more between optimizer steps (a validation loop) or after the last step (a final test). Dropout counts
whether it is a layer or a call: ``F.dropout(x, p, training=self.training)`` and
``F.scaled_dot_product_attention(dropout_p=self.p if self.training else 0.0)`` drop in a model left in
training mode just as ``nn.Dropout`` does.
"""

from __future__ import annotations

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import ForwardInfo, describe_forwards, evaluation_site


class EvalMode(Check, id="eval-mode", severity="warning", requires=("forwards",)):
    def install(self) -> None:
        self.helper("forwards").evaluation_listeners.append(self.on_evaluation)

    def on_evaluation(self, group: list[ForwardInfo]) -> None:
        bad = [info for info in group if info.training and _active(info)]
        if not bad:
            return
        first = bad[0]
        how = ("under torch.no_grad()/inference_mode" if first.kind == "no-grad"
               else "without any backward pass (evaluation)")
        active = _active(first)
        layers = ", ".join(active[:3]) + (" ..." if len(active) > 3 else "")
        where, generator = evaluation_site(bad)
        if generator is not None:
            graph = (" and with autograd recording: every sampled step built a graph that nothing used"
                     if first.kind == "unused" else "")
            effects = [text for kind, text in (("Dropout", "Dropout changes every sampled step at random"),
                                               ("BatchNorm", "BatchNorm learns its statistics from the samples"))
                       if kind.lower() in layers.lower()]
            self.report(
                f"{generator}(...), called here, ran {first.name}(...) {len(bad)} times to generate (each input "
                f"the previous one plus the sampled step) while the model was in training mode{graph}. Active: "
                f"{layers}: {' and '.join(effects)}.",
                f"Sample in evaluation mode without a graph: `model.eval(); with torch.no_grad(): "
                f"{generator}(...)`, then model.train() before training continues (or decorate {generator} "
                "with @torch.no_grad() and switch the mode inside it).", where=where)
            return
        self.report(
            f"{describe_forwards(bad)} {how} while the model was in training mode. Active: {layers}. "
            "Dropout drops activations at random and BatchNorm uses the batch's statistics and overwrites its "
            "running statistics with evaluation data, so the metrics are wrong and noisy.",
            "Call model.eval() before evaluating and model.train() before training again "
            "(e.g. `model.eval(); with torch.inference_mode(): ...; model.train()`).", where=first.where)


def _active(info: ForwardInfo) -> list[str]:
    """The Dropout/BatchNorm layers in training mode, then the functional dropout calls that dropped."""
    calls = [f"{call.call} in {call.module}" for call in info.functional if call.module_training]
    return info.active_layers + calls
