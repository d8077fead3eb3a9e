"""inplace-saved: an in-place operation overwrote a tensor that autograd saved for backward.

The check installs saved-tensor hooks to learn which line saved each tensor. Saved-tensor hooks switch
off PyTorch's own version-counter check, so the check re-implements it: it records each tensor's version
when packed and raises PyTorch's error (with both lines) when a tensor comes back with another version.

The finding names the culprit first: the call that changed the tensor (an ``optimizer.step()`` between a
GAN's discriminator update and the generator's backward, an in-place op), then the line that saved it.
A storage stays watched for as long as a graph that saved it is alive (a graph kept with
``retain_graph=True`` and backpropagated again is the classic GAN case), not only until its first backward.
When the change was made by a layer built with ``inplace=True`` (``nn.ReLU(inplace=True)``,
``nn.Dropout(p, inplace=True)``), the finding is at the line that built the layer (in ``__init__``), where
the fix goes, and names the ``forward`` line that ran it.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where

Tensor = torch.Tensor
Where = tuple[str, int] | None


def inplace_layer_classes() -> list[type]:
    """The torch.nn layers with an ``inplace`` argument that define their own ``__init__``."""
    from torch import nn

    found = []
    for value in [*vars(nn).values(), nn.modules.dropout._DropoutNd]:
        code = getattr(vars(value).get("__init__"), "__code__", None) if isinstance(value, type) else None
        if code is not None and issubclass(value, nn.Module) and "inplace" in code.co_varnames:
            found.append(value)
    return found


def _storage_key(tensor: Tensor) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # sparse, nested, or tensors without storage
        return None


class _Packed:
    """What the pack hook keeps for one saved tensor; freed with the graph that saved it."""

    __slots__ = ("tensor", "version", "key", "saved_at", "origin", "owner")

    def __init__(self, tensor: Tensor, key: int | None, saved_at: Any, origin: str, owner: InplaceSaved) -> None:
        # detach(): the packed value must not hold the output's grad_fn (a reference cycle through C++).
        self.tensor, self.version, self.key = tensor.detach(), tensor._version, key
        self.saved_at, self.origin, self.owner = saved_at, origin, owner

    def __del__(self) -> None:  # the graph holding this saved tensor was freed
        key, owner = self.key, self.owner
        if key is None or owner is None:
            return
        left = owner.saved.get(key, 0) - 1
        if left > 0:
            owner.saved[key] = left
        else:
            owner.saved.pop(key, None)
            owner.modified.pop(key, None)


class InplaceSaved(Check, id="inplace-saved", severity="error"):
    def setup(self) -> None:
        self.saved: dict[int, int] = {}  # storage -> how many saved tensors (not yet unpacked) use it
        self.modified: dict[int, tuple[str, Where, Where]] = {}  # storage -> (op, where, the layer's definition)
        self.defined: weakref.WeakKeyDictionary[Any, Where] = weakref.WeakKeyDictionary()  # inplace=True layers
        self._hooks: Any = None
        self.paused = False  # another check reads saved tensors: not a use by backward

    def install(self) -> None:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        check = self

        def make(original: Any) -> Any:
            def __init__(layer: Any, *args: Any, **kwargs: Any) -> None:
                original(layer, *args, **kwargs)
                if getattr(layer, "inplace", False) and layer not in check.defined:
                    check.defined[layer] = check.session.where()
            return __init__

        for cls in inplace_layer_classes():
            self.session.patch(cls, "__init__", make)

    def uninstall(self) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None

    def finish(self) -> None:
        self.saved.clear()
        self.modified.clear()

    # ----------------------------------------------------------------- saved-tensor hooks
    def _pack(self, tensor: Tensor) -> _Packed | Tensor:
        if torch.compiler.is_compiling():  # inside torch.compile's tracing: stay out of its graph
            return tensor
        key = _storage_key(tensor)
        if key is not None:
            if len(self.saved) >= 100_000:  # graphs dropped without backward (evaluation): start over
                self.saved.clear()
                self.modified.clear()
            self.saved[key] = self.saved.get(key, 0) + 1
        grad_fn = tensor.grad_fn
        origin = f"output {tensor.output_nr} of {type(grad_fn).__name__}" if grad_fn is not None else "a leaf"
        return _Packed(tensor, key, self.session.where(), origin, self)

    def _unpack(self, packed: _Packed | Tensor) -> Tensor:
        if isinstance(packed, Tensor):
            return packed
        tensor = packed.tensor
        if tensor._version != packed.version and not self.paused:
            self._violation(packed)
        return tensor

    def _violation(self, packed: _Packed) -> None:
        tensor, version, key = packed.tensor, packed.version, packed.key
        op, changed_at, defined_at = self.modified.get(key, ("an in-place operation", None, None)) if (
            key is not None) else ("an in-place operation", None, None)
        described = f"[{tensor.type()} {list(tensor.shape)}]"
        saved_text = format_where(packed.saved_at)
        culprit = f"{op} at {format_where(changed_at)}" if changed_at else op
        if defined_at is not None:
            culprit = f"{op}, built with inplace=True here and run at {format_where(changed_at)},"
            changed_at = defined_at
        self.report(
            f"{culprit} changed a tensor {described} that autograd had saved at {saved_text} ({packed.origin}) "
            f"to compute gradients; backward needs the old values (version {version}, now {tensor._version}).",
            "Use the out-of-place form (x = x + 1, torch.relu(x), nn.ReLU(inplace=False)) or change a "
            ".clone() of it; if optimizer.step() ran between forward and backward, finish all backward() calls "
            "first.", where=changed_at or packed.saved_at)
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"{described}, which is {packed.origin}, is at version {tensor._version}; expected version {version} "
            f"instead. (torchwork doctor: saved at {saved_text}, modified by {op}"
            + (f" at {format_where(changed_at)})" if changed_at else ")"))

    # ----------------------------------------------------------------- who writes in place
    def on_inplace(self, func: Any, tensor: Tensor) -> None:
        if not self.saved:
            return
        key = _storage_key(tensor)
        if key is not None and key in self.saved:
            name = getattr(func, "__name__", "an in-place operation")
            running = self.session.running_modules()
            layer = running[-1] if running else None
            defined_at = self.defined.get(layer) if layer is not None else None
            if defined_at is not None:
                self.modified[key] = (f"`{type(layer).__name__}(inplace=True)`", self.session.where(), defined_at)
            else:
                self.modified[key] = (f"`{name}`", self.session.where(), None)

    def on_step_pre(self, optimizer: Any) -> None:
        if not self.saved:
            return
        where = self.session.where()
        for group in optimizer.param_groups:
            for param in group["params"]:
                key = _storage_key(param)
                if key in self.saved:
                    self.modified[key] = (f"{type(optimizer).__name__}.step()", where, None)
