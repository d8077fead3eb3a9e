"""view-mutation (info): a write through a view changed a tensor that the script then read again.

Only writes made directly by the user's code count, through a view the code holds in a variable
(``scores = targets[:, 0]`` then ``scores.clamp_(min=0)``), and only once the viewed tensor is read again
afterwards: the surprise is a base that changed behind the user's back. A view made in the statement
that writes (``images[k, 0, r0:r1, c0:c1] += 0.9``, ``x[:, 0].mul_(2)``) names the tensor it changes, so the
change is the intent; writes that overwrite the view whatever it held (``x[:, 0].uniform_(-1, 1)``,
``fill_``, ``zero_``, ``copy_``, the ``nn.init`` functions) fill part of a tensor on purpose. A view
written after its base was saved for backward is the error ``inplace-saved`` reports (with both lines).
A view a function received as a parameter and writes (``accumulate(totals[i:j], ...)`` doing ``total.add_(...)``,
the online-softmax accumulators of trl's ``chunked_logprob``) is an output buffer: the caller wrote the
slice in the call, as in the writing statement above.
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.op_categories import RANDOM_OPS

_OVERWRITES = RANDOM_OPS | {"fill_", "zero_", "copy_", "set_", "index_fill_", "masked_fill_", "fill_diagonal_",
                            "__setitem__", "constant_", "ones_", "zeros_", "eye_", "dirac_"}
WATCH_OPS = 100_000  # operations watched for a read of a changed base before giving up


def _parameter_names(code: types.CodeType) -> set[str]:
    """The names of a function's parameters (none at module level)."""
    if code.co_name == "<module>":
        return set()
    count = code.co_argcount + code.co_kwonlyargcount
    return set(code.co_varnames[:count])


class ViewMutation(Check, id="view-mutation", severity="info"):
    def setup(self) -> None:
        # id(base) -> (a weak reference to it, the write's line, the note's text)
        self.pending: dict[int, tuple[weakref.ReferenceType[torch.Tensor], tuple[str, int] | None, str]] = {}
        self.watched = 0

    def on_inplace(self, func: Any, tensor: Any) -> None:
        if getattr(func, "__name__", "") in _OVERWRITES:
            return
        if not tensor._is_view() or not self.session.locator.caller_is_user(1):
            return
        base = tensor._base
        # references: `base` here, getrefcount's argument, the view's own link; more means someone holds it
        if base is None or sys.getrefcount(base) <= 3 or id(base) in self.pending:
            return
        frame = self._user_frame()
        holders = [] if frame is None else [name for name, value in list(frame.f_locals.items()) if value is tensor]
        if not holders:
            return  # a view made in the writing statement: the write to its base is what the code says
        if set(holders) <= _parameter_names(frame.f_code):
            return  # a slice the caller passed in to be written (an output buffer, an accumulator)
        name = getattr(func, "__name__", "an in-place operation")
        text = (f"`{name}` wrote through a view {list(tensor.shape)} of a tensor {list(base.shape)}, and that tensor "
                "was read again afterwards: it had changed too (slices, .view(), .transpose(), .T, indexing with "
                "':' and iterating rows all share memory with it).")
        self.pending[id(base)] = (weakref.ref(base), self.session.where(), text)
        self.watched = 0
        self.session.arm_derivation(self._on_operation)

    def _user_frame(self) -> types.FrameType | None:
        frame: types.FrameType | None = sys._getframe(2)
        locator = self.session.locator
        while frame is not None and not locator.is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        return frame

    def _on_operation(self, args: tuple, out: Any) -> None:
        self.watched += 1
        for arg in args:
            for item in (arg if isinstance(arg, (list, tuple)) else (arg,)):
                entry = self.pending.get(id(item)) if isinstance(item, torch.Tensor) else None
                if entry is not None and entry[0]() is item:
                    del self.pending[id(item)]
                    self.report(entry[2], "If the original must stay unchanged, take a copy first "
                                "(v = x[0].clone()); if the change is intended, ignore this note.", where=entry[1])
        if not self.pending or self.watched > WATCH_OPS:
            self.pending.clear()
            self.session.disarm_derivation(self._on_operation)
