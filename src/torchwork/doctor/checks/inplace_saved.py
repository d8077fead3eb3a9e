"""inplace-saved: an in-place operation overwrote a tensor that autograd saved for backward.

The check installs saved-tensor hooks to learn which line saved each tensor. Saved-tensor hooks switch
off PyTorch's own version-counter check, so the check re-implements it: it records each tensor's version
when packed and raises PyTorch's error (with both lines) when a tensor comes back with another version.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where

Tensor = torch.Tensor


def _storage_key(tensor: Tensor) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # sparse, nested, or tensors without storage
        return None


class InplaceSaved(Check):
    id = "inplace-saved"
    severity = "error"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.saved: set[int] = set()  # storages currently saved for backward
        self.modified: dict[int, tuple[str, tuple[str, int] | None]] = {}  # storage -> (op, where)
        self._hooks: Any = None

    def install(self) -> None:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()

    def uninstall(self) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None

    # ----------------------------------------------------------------- saved-tensor hooks
    def _pack(self, tensor: Tensor) -> Any:
        key = _storage_key(tensor)
        if key is not None and len(self.saved) < 1_000_000:
            self.saved.add(key)
        grad_fn = tensor.grad_fn
        origin = f"output {tensor.output_nr} of {type(grad_fn).__name__}" if grad_fn is not None else "a leaf"
        # detach(): the packed value must not hold the output's grad_fn (a reference cycle through C++).
        return tensor.detach(), tensor._version, key, self.session.where(), origin

    def _unpack(self, packed: Any) -> Tensor:
        tensor, version, key, saved_at, origin = packed
        if tensor._version != version:
            self._violation(tensor, version, key, saved_at, origin)
        return tensor

    def _violation(self, tensor: Tensor, version: int, key: int | None, saved_at: Any, origin: str) -> None:
        op, changed_at = self.modified.get(key, ("an in-place operation", None)) if key is not None else (
            "an in-place operation", None)
        described = f"[{tensor.type()} {list(tensor.shape)}]"
        saved_text = format_where(saved_at)
        where = changed_at or saved_at
        self.report(
            f"{op} changed a tensor {described} that autograd had saved at {saved_text} ({origin}) to compute "
            f"gradients; backward needs the old values (version {version}, now {tensor._version}).",
            "Use the out-of-place form (x = x + 1, torch.relu(x), nn.ReLU(inplace=False)) or change a "
            ".clone() of it; if optimizer.step() ran between forward and backward, finish all backward() calls "
            "first.", where=where)
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"{described}, which is {origin}, is at version {tensor._version}; expected version {version} "
            f"instead. (torchwork doctor: saved at {saved_text}, modified by {op}"
            + (f" at {format_where(changed_at)})" if changed_at else ")"))

    # ----------------------------------------------------------------- who writes in place
    def on_inplace(self, func: Any, tensor: Tensor) -> None:
        if not self.saved:
            return
        key = _storage_key(tensor)
        if key is not None and key in self.saved:
            name = getattr(func, "__name__", "an in-place operation")
            self.modified[key] = (f"`{name}`", self.session.where())

    def on_step_pre(self, optimizer: Any) -> None:
        if not self.saved:
            return
        where = self.session.where()
        for group in optimizer.param_groups:
            for param in group["params"]:
                key = _storage_key(param)
                if key in self.saved:
                    self.modified[key] = (f"{type(optimizer).__name__}.step()", where)

    def on_backward_post(self, tensor: Any) -> None:
        self.saved.clear()
        self.modified.clear()
