"""batchnorm-single-sample: a batch of one reaches BatchNorm in training mode.

One short batch is one finding naming every layer of that forward pass that received it (a layer that
never ran on it is not named). The cause comes first: when a DataLoader's settings make the batch of one
(``drop_last=False`` and ``len(dataset) % batch_size == 1``), the finding is at the line that built that
DataLoader, and names the BatchNorm layer's line; otherwise it is at the first BatchNorm layer it reached.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where


def leaves_one(loader: Any) -> tuple[int, int] | None:
    """(dataset size, batch size) when the loader's last batch holds a single sample, else None."""
    try:
        size, batch, drop = len(loader.dataset), loader.batch_size, loader.drop_last
    except (TypeError, AttributeError):
        return None
    return (size, batch) if batch and batch > 1 and not drop and size % batch == 1 else None


def loader_hint(loader: Any) -> str:
    """Why a DataLoader yields a batch of one, when its settings tell."""
    found = leaves_one(loader)
    if found is None:
        return ""
    size, batch = found
    return (f" The DataLoader has {size} samples with batch_size={batch} and drop_last=False "
            f"({size} % {batch} == 1), so the last batch of every epoch holds a single sample.")


class BatchNormSingleSample(Check, id="batchnorm-single-sample", severity="warning"):
    def setup(self) -> None:
        self.layers: list[str] = []  # the layers the current forward pass's batch of one reached
        self.finding: Any = None
        self.loader: Any = None
        self.symptom: tuple[str, int] | None = None
        self.shape: list[int] = []
        self.built: weakref.WeakKeyDictionary[Any, tuple[str, int] | None] = weakref.WeakKeyDictionary()

    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
                original(loader, *args, **kwargs)
                if leaves_one(loader) is not None:
                    check.built[loader] = check.session.where()
            return __init__

        self.session.patch(DataLoader, "__init__", make)

    def _culprit(self) -> tuple[Any, tuple[str, int] | None] | None:
        """The DataLoader that makes batches of one, and the line that built it (the one running, else the
        only one built)."""
        current = self.session.current_loader()
        if current is not None and current in self.built:
            return current, self.built[current]
        loaders = list(self.built.items())
        return loaders[0] if len(loaders) == 1 and current is None else None

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
            culprit = self._culprit()
            symptom = self.session.where()
            self.loader, self.symptom = (culprit[0], symptom) if culprit else (None, None)
            self.finding = self.report("", "Drop the short last batch in training (DataLoader(..., drop_last=True)); "
                                       "call model.eval() for single-sample inference.",
                                       where=culprit[1] if culprit and culprit[1] else symptom)
        self.finding.message = self._message()

    def _message(self) -> str:
        if self.loader is not None:
            size, batch = leaves_one(self.loader) or (0, 0)
            reached = ", ".join(self.layers)
            return (f"This DataLoader (batch_size={batch}, drop_last=False, {size} samples: {size} % {batch} == 1) "
                    f"ends every epoch with a batch of one sample, which reached {reached} in training mode at "
                    f"{format_where(self.symptom)}: batch statistics of one sample are meaningless (BatchNorm1d "
                    "raises, BatchNorm2d silently normalises each image by itself).")
        hint = loader_hint(self.session.current_loader())
        reached = self.layers[0] if len(self.layers) == 1 else (
            f"{len(self.layers)} BatchNorm layers ({', '.join(self.layers)})")
        return (f"{reached} received a batch of one sample {self.shape} in training mode: batch statistics of one "
                "sample are meaningless (BatchNorm1d raises, BatchNorm2d silently normalises each image by "
                f"itself).{hint}")
