"""inplace-leaf: an in-place update of a leaf tensor that requires grad, outside ``torch.no_grad()``.

PyTorch refuses the operation; the check names the tensor and the line.
"""

from __future__ import annotations

from typing import Any

from torchwork.doctor.checks import Check


class InplaceLeaf(Check, id="inplace-leaf", severity="error"):
    def on_op_error(self, func: Any, args: tuple, kwargs: dict, error: BaseException) -> None:
        if "a leaf Variable that requires grad" not in str(error):
            return
        target = args[0] if args else None
        shape = f" of shape {tuple(target.shape)}" if hasattr(target, "shape") else ""
        name = getattr(func, "__name__", "an in-place operation")
        self.report(
            f"`{name}` tried to change a leaf tensor{shape} that requires grad (a parameter) while autograd "
            "was recording: a hand-written update such as `w -= lr * w.grad` must not be part of the graph.",
            "Wrap manual updates in `with torch.no_grad():` (or use torch.optim), and initialise parameters "
            "with torch.nn.init or under no_grad.")
