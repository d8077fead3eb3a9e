"""dropout-in-eval: functional dropout still active inside a module that is in eval mode.

``model.eval()`` switches off ``nn.Dropout`` layers, not dropout requested through functions:
``F.scaled_dot_product_attention`` has no training flag and drops attention weights whenever
``dropout_p > 0``, and ``F.dropout(x, p)`` defaults to ``training=True``. Called from a module's
``forward`` with a fixed rate, both keep dropping after ``model.eval()`` (timm PR #1978, vjepa2 PR #160,
torch-harmonics PR #221, wenet issue #2699).

Only evaluation is judged: a call under ``no_grad``/``inference_mode``, or in a forward pass that the
``forwards`` helper finds was evaluation (its graph never used by backward). A model kept in eval mode
while it trains (BatchNorm frozen that way) may want its functional dropout; that is not reported. A line
that spells ``training=True`` out is read as dropout kept on at inference on purpose (Monte Carlo dropout).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._dropout import (
    FUNCTIONAL_DROPOUT,
    SDPA,
    FunctionalDropout,
    active_rate,
    spelled_on,
)
from torchwork.doctor.checks._forwards import ForwardInfo


class DropoutInEval(Check, id="dropout-in-eval", severity="warning", requires=("forwards",),
                    ops=FUNCTIONAL_DROPOUT):
    def install(self) -> None:
        self.helper("forwards").evaluation_listeners.append(self.on_evaluation)

    def on_op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            return  # judged once the forward pass is known to be evaluation (on_evaluation)
        running = self.session.running_modules()
        if not running or running[-1].training or isinstance(running[-1], nn.modules.dropout._DropoutNd):
            return
        name = getattr(func, "__name__", "")
        rate = active_rate(name, args, kwargs)
        if rate > 0:
            module = running[-1]
            self._report(FunctionalDropout(name, rate, f"{self.session.module_name(module)} "
                                           f"({type(module).__name__})", False, self.session.where()))

    def on_evaluation(self, group: list[ForwardInfo]) -> None:
        for info in group:
            if info.kind == "unused":
                for call in info.functional:
                    if not call.module_training:
                        self._report(call)

    def _report(self, call: FunctionalDropout) -> None:
        if call.name != SDPA and spelled_on(call.where):
            return
        if call.name == SDPA:
            self.report(
                f"{call.call} ran inside {call.module}, which is in eval mode: the function has no training "
                "flag, so it still drops attention weights at random after model.eval(); evaluation and "
                "inference outputs are noisy and not repeatable.",
                "Pass the rate only while training: `dropout_p=self.dropout if self.training else 0.0` "
                "(or keep the attention dropout in an nn.Dropout layer, which model.eval() switches off).",
                where=call.where)
            return
        self.report(
            f"{call.call} ran with training=True inside {call.module}, which is in eval mode: F.{call.name} does "
            "not read the module's mode (its `training` argument defaults to True), so it keeps dropping "
            "activations after model.eval(); evaluation outputs are noisy and not repeatable.",
            f"Pass the module's mode: `F.{call.name}(x, p, training=self.training)` (or use an nn.Dropout layer, "
            "which model.eval() switches off).", where=call.where)
