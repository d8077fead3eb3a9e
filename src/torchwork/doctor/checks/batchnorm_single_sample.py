"""batchnorm-single-sample: a batch of one reaches BatchNorm in training mode.

One short batch is one finding, at the first BatchNorm layer it reached, naming every layer of that
forward pass that received it (a layer that never ran on it is not named).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchwork.doctor.checks import Check


def loader_hint(loader: Any) -> str:
    """Why a DataLoader yields a batch of one, when its settings tell."""
    try:
        size, batch, drop = len(loader.dataset), loader.batch_size, loader.drop_last
    except (TypeError, AttributeError):
        return ""
    if batch and not drop and size % batch == 1:
        return (f" The DataLoader has {size} samples with batch_size={batch} and drop_last=False, so the last "
                "batch of every epoch holds a single sample.")
    return ""


class BatchNormSingleSample(Check):
    id = "batchnorm-single-sample"
    severity = "warning"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.layers: list[str] = []  # the layers the current forward pass's batch of one reached
        self.finding: Any = None
        self.shape: list[int] = []

    def on_module_pre(self, module: Any, args: tuple, kwargs: dict, top: bool) -> None:
        if top:
            self.layers, self.finding = [], None
        if not isinstance(module, nn.modules.batchnorm._BatchNorm) or not module.training or not args:
            return
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[0] != 1:
            return
        self.layers.append(f"{self.session.module_name(module)} ({type(module).__name__})")
        if self.finding is None:
            self.shape = list(x.shape)
            self.finding = self.report("", "Drop the short last batch in training (DataLoader(..., drop_last=True)); "
                                       "call model.eval() for single-sample inference.")
        self.finding.message = self._message()

    def _message(self) -> str:
        hint = loader_hint(self.session.current_loader())
        reached = self.layers[0] if len(self.layers) == 1 else (
            f"{len(self.layers)} BatchNorm layers ({', '.join(self.layers)})")
        return (f"{reached} received a batch of one sample {self.shape} in training mode: batch statistics of one "
                "sample are meaningless (BatchNorm1d raises, BatchNorm2d silently normalises each image by "
                f"itself).{hint}")
