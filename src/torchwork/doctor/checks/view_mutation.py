"""view-mutation (info): an in-place write through a view also changed the tensor it views.

Only writes made directly by the user's code count, and only when the viewed tensor is still referenced
elsewhere (a temporary base nobody can see is harmless). Writes that overwrite the view whatever it held
(``x[:, 0].uniform_(-1, 1)``, ``fill_``, ``zero_``, ``copy_``, the ``nn.init`` functions) are how one fills
part of a tensor on purpose and are not reported: the surprise is an update of values read from a view.
"""

from __future__ import annotations

import sys
from typing import Any

from torchwork.doctor.checks import Check
from torchwork.doctor.session import RANDOM_OPS

_OVERWRITES = RANDOM_OPS | {"fill_", "zero_", "copy_", "set_", "index_fill_", "masked_fill_", "fill_diagonal_",
                            "__setitem__", "constant_", "ones_", "zeros_", "eye_", "dirac_"}


class ViewMutation(Check):
    id = "view-mutation"
    severity = "info"

    def on_inplace(self, func: Any, tensor: Any) -> None:
        if getattr(func, "__name__", "") in _OVERWRITES:
            return
        if not tensor._is_view() or not self.session.locator.caller_is_user(1):
            return
        base = tensor._base
        # references: `base` here, getrefcount's argument, the view's own link; more means someone holds it
        if base is None or sys.getrefcount(base) <= 3:
            return
        name = getattr(func, "__name__", "an in-place operation")
        self.report(
            f"`{name}` wrote through a view {list(tensor.shape)} of a tensor {list(base.shape)}: the original "
            "tensor changed too (slices, .view(), .transpose(), .T, indexing with ':' and iterating rows all "
            "share memory with it).",
            "If the original must stay unchanged, take a copy first (v = x[0].clone()); if the change is "
            "intended, ignore this note.")
