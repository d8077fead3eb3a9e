"""Train and eval modes: each submodule's flag kept across an evaluation, and frozen BatchNorm kept in eval.

``fit`` remembers every submodule's ``training`` flag when it starts (:class:`TrainModes`), puts them back
at each epoch start, and then puts every BatchNorm whose parameters are all frozen in eval mode
(:func:`keep_frozen_norms_in_eval`, also exported as ``torchwork.finetune.keep_frozen_norms_in_eval``, its
home for a loop of your own): a frozen layer's running statistics do not drift while the rest trains, and a
layer unfrozen later trains again. :func:`evaluating` is ``trainer.evaluating()``.

Example:
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4), nn.Dropout())
    >>> _ = model[1].requires_grad_(False)
    >>> modes = TrainModes(model)
    >>> modes.capture(); _ = model.eval(); modes.restore()
    >>> [m.training for m in model]   # the frozen BatchNorm stays in eval
    [True, False, True]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from torchwork.engine.precision import PrecisionPlan

# torch is imported where it is used: torchwork.finetune.freezing exports keep_frozen_norms_in_eval, and
# `from torchwork.finetune import freeze` imports no torch until a function runs.


class TrainModes:
    """Each submodule's ``training`` flag as ``fit`` found it, put back at every epoch start."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.saved: list[bool] | None = None  # None: not captured, the whole model trains

    def capture(self) -> None:
        """Remember each submodule's training flag, so that a frozen BatchNorm stays in eval."""
        if not self.model.training:
            self.model.train()  # the whole model was left in eval (e.g. after loading): train it all
        self.saved = [m.training for m in self.model.modules()]

    def restore(self) -> None:
        """Put the captured flags back (else train everything), then keep frozen BatchNorm in eval."""
        if self.saved is None:
            self.model.train()
        else:
            for module, mode in zip(self.model.modules(), self.saved):
                module.training = mode
        keep_frozen_norms_in_eval(self.model)


@contextlib.contextmanager
def evaluating(model: nn.Module, precision: PrecisionPlan) -> Iterator[None]:
    """``model.eval()`` + ``torch.inference_mode()`` (+ the precision's autocast), restoring every
    submodule's mode after."""
    import torch

    modes = [m.training for m in model.modules()]
    model.eval()
    try:
        with torch.inference_mode(), precision.autocast():
            yield
    finally:
        for module, mode in zip(model.modules(), modes):
            module.training = mode


def keep_frozen_norms_in_eval(model: nn.Module) -> list[str]:
    """Put every BatchNorm whose parameters are all frozen (``requires_grad=False``) in eval mode, so that
    its running statistics do not drift while the rest trains; returns their names. ``fit`` calls it at
    each epoch start, after restoring the modes, so a layer unfrozen later trains again.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 4), nn.BatchNorm1d(4)).train()
        >>> _ = model[1].requires_grad_(False)
        >>> keep_frozen_norms_in_eval(model), model[1].training
        (['1'], False)
    """
    from torch.nn.modules.batchnorm import _BatchNorm

    names = []
    for name, module in model.named_modules():
        if isinstance(module, _BatchNorm) and module.training and module.track_running_stats:
            params = list(module.parameters(recurse=False))
            if params and not any(p.requires_grad for p in params):
                module.eval()
                names.append(name)
    return names
