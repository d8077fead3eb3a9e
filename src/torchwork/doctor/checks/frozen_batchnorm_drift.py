"""frozen-batchnorm-drift: a BatchNorm whose parameters are frozen still updates its running statistics.

``requires_grad_(False)`` freezes the affine weights, not the statistics: in training mode every forward
pass moves ``running_mean``/``running_var`` toward the new data, so the "frozen" pretrained layer
drifts and evaluation (which uses those statistics) changes. Reported when the statistics actually
change during a forward pass with autograd on (a training pass).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchwork.doctor.checks import Check


class FrozenBatchNormDrift(Check, id="frozen-batchnorm-drift", severity="warning"):
    def setup(self) -> None:
        self.before: dict[int, torch.Tensor] = {}

    @staticmethod
    def _frozen(module: Any) -> bool:
        if not isinstance(module, nn.modules.batchnorm._BatchNorm) or not module.training:
            return False
        if not module.track_running_stats or module.running_mean is None:
            return False
        params = list(module.parameters(recurse=False))
        return bool(params) and not any(p.requires_grad for p in params)

    def on_module_pre(self, module: Any, args: tuple, kwargs: dict, top: bool) -> None:
        if torch.is_grad_enabled() and self._frozen(module):
            self.before[id(module)] = module.running_mean.detach().clone()

    def on_module_post(self, module: Any, args: tuple, output: Any, top: bool) -> None:
        before = self.before.pop(id(module), None)
        if before is None or torch.equal(before, module.running_mean):
            return
        self.report(
            f"{self.session.module_name(module)} ({type(module).__name__}) has frozen parameters "
            "(requires_grad=False) but is in training mode, so this forward pass changed its running "
            "statistics: the pretrained layer drifts toward this data and evaluation results move with it.",
            "Keep frozen BatchNorm layers in eval mode after every model.train(): "
            "torchwork.finetune.keep_frozen_norms_in_eval(model) (Trainer.fit does it each epoch), or call "
            ".eval() on those BatchNorm layers after each model.train().")
