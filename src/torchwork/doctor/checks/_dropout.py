"""Dropout requested through functions (``F.dropout``, ``F.scaled_dot_product_attention(dropout_p=)``).

``model.eval()`` switches off ``nn.Dropout`` layers only. These helpers read a functional call's arguments
for the rate it applies, whatever the module's mode; the ``forwards`` helper records such calls per
forward pass, and ``dropout-in-eval`` / ``eval-mode`` judge them.

Example:
    >>> active_rate("dropout", (None, 0.1), {})  # F.dropout(x, 0.1): training defaults to True
    0.1
    >>> active_rate("scaled_dot_product_attention", (None, None, None), {"dropout_p": 0.0})
    0.0
"""

from __future__ import annotations

import dataclasses
import linecache
import re
from typing import Any

SDPA = "scaled_dot_product_attention"
DROPOUTS = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"})
FUNCTIONAL_DROPOUT = DROPOUTS | {SDPA}
_SPELLED_ON = re.compile(r"\btrain(?:ing)?\s*=\s*True\b")


@dataclasses.dataclass
class FunctionalDropout:
    """One functional dropout call seen in a forward pass: which, at what rate, in which module, where."""

    name: str
    rate: float
    module: str  # "Model.blocks.0.attn (Attention)"
    module_training: bool
    where: tuple[str, int] | None
    module_id: int = 0

    @property
    def call(self) -> str:
        return (f"F.scaled_dot_product_attention(dropout_p={self.rate:g})" if self.name == SDPA
                else f"F.{self.name}(p={self.rate:g})")


def _argument(args: tuple, kwargs: dict, names: tuple[str, ...], index: int, default: Any) -> Any:
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return args[index] if len(args) > index else default


def active_rate(name: str, args: tuple, kwargs: dict) -> float:
    """The dropout rate a call of ``name`` applies (0.0 when it applies none)."""
    try:
        if name == SDPA:  # (query, key, value, attn_mask=None, dropout_p=0.0, ...)
            return float(_argument(args, kwargs, ("dropout_p",), 4, 0.0))
        if name in DROPOUTS and bool(_argument(args, kwargs, ("training", "train"), 2, True)):
            return float(_argument(args, kwargs, ("p",), 1, 0.5))
    except (TypeError, ValueError, RuntimeError):  # an odd argument: not ours to judge
        return 0.0
    return 0.0


def spelled_on(where: tuple[str, int] | None) -> bool:
    """Whether the user's line passes ``training=True`` literally (dropout kept on at inference on purpose)."""
    return where is not None and bool(_SPELLED_ON.search(linecache.getline(where[0], where[1])))
