"""inplace-saved: an in-place operation overwrote a tensor that autograd saved for backward.

The check installs saved-tensor hooks to learn which line saved each tensor. Saved-tensor hooks switch
off PyTorch's own version-counter check, so the check re-implements it: it records each tensor's version
when packed and raises PyTorch's error (with both lines) when a tensor comes back with another version.

The finding names the culprit first: the call that changed the tensor (an ``optimizer.step()`` between a
GAN's discriminator update and the generator's backward, an in-place op), then the line that saved it.
Every in-place write the doctor sees is remembered by storage with when it happened (the newest 32k-64k
storages), so a violation found at a later backward, even of a graph kept with ``retain_graph=True`` and
backpropagated again (the classic GAN case), names the write that came after the save, never an older one.
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
    """The address of the tensor's storage: None where it has none (sparse, nested, or empty: every empty
    storage is at address 0)."""
    try:
        return tensor.untyped_storage().data_ptr() or None
    except Exception:  # sparse, nested, or tensors without storage
        return None


# What the pack hook keeps for one saved tensor: a tuple (cheaper than an object, and nothing to free):
# (the tensor detached, its version when saved, the user's line that saved it, its grad_fn class, its output
# number, the op count when saved). detach(): the packed value must not hold the output's grad_fn (a reference
# cycle through C++). The description ("output 0 of ReluBackward0") is written only for a violation.
_Packed = tuple
_TENSOR, _VERSION, _SAVED_AT, _GRAD_FN, _OUTPUT_NR, _SAVED_WHEN = range(6)
_MODIFIED_LIMIT = 65_536  # storages remembered as written in place; the older half is forgotten beyond it


class InplaceSaved(Check, id="inplace-saved", severity="error"):
    def setup(self) -> None:
        # storage -> (op, where, the layer's definition, the op count when written): every in-place write the
        # doctor saw, so a violation found at backward names the write that came after the save
        self.modified: dict[int, tuple[str, Where, Where, int]] = {}
        self.defined: weakref.WeakKeyDictionary[Any, Where] = weakref.WeakKeyDictionary()  # inplace=True layers
        self._hooks: Any = None
        self.paused = False  # another check reads saved tensors: not a use by backward
        self.clock = 0  # counts packs and in-place writes: which came first

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
        self.modified.clear()

    # ----------------------------------------------------------------- saved-tensor hooks
    def _pack(self, tensor: Tensor) -> _Packed | Tensor:
        if torch.compiler.is_compiling():  # inside torch.compile's tracing: stay out of its graph
            return tensor
        grad_fn = tensor.grad_fn
        self.clock += 1
        return (tensor.detach(), tensor._version, self.session.op_where(),
                None if grad_fn is None else type(grad_fn), tensor.output_nr, self.clock)

    def _unpack(self, packed: _Packed | Tensor) -> Tensor:
        if isinstance(packed, Tensor):
            return packed
        tensor = packed[_TENSOR]
        if tensor._version != packed[_VERSION] and not self.paused:
            self._violation(packed)
        return tensor

    def _violation(self, packed: _Packed) -> None:
        tensor, version, saved_at = packed[_TENSOR], packed[_VERSION], packed[_SAVED_AT]
        grad_fn = packed[_GRAD_FN]
        origin = f"output {packed[_OUTPUT_NR]} of {grad_fn.__name__}" if grad_fn is not None else "a leaf"
        written = self.modified.get(_storage_key(tensor))  # type: ignore[arg-type]
        if written is None or written[3] < packed[_SAVED_WHEN]:  # not seen, or written before it was saved
            written = ("an in-place operation", None, None, 0)
        op, changed_at, defined_at, _ = written
        described = f"[{tensor.type()} {list(tensor.shape)}]"
        saved_text = format_where(saved_at)
        culprit = f"{op} at {format_where(changed_at)}" if changed_at else op
        if defined_at is not None:
            culprit = f"{op}, built with inplace=True here and run at {format_where(changed_at)},"
            changed_at = defined_at
        self.report(
            f"{culprit} changed a tensor {described} that autograd had saved at {saved_text} ({origin}) "
            f"to compute gradients; backward needs the old values (version {version}, now {tensor._version}).",
            "Use the out-of-place form (x = x + 1, torch.relu(x), nn.ReLU(inplace=False)) or change a "
            ".clone() of it; if optimizer.step() ran between forward and backward, finish all backward() calls "
            "first.", where=changed_at or saved_at)
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"{described}, which is {origin}, is at version {tensor._version}; expected version {version} "
            f"instead. (torchwork doctor: saved at {saved_text}, modified by {op}"
            + (f" at {format_where(changed_at)})" if changed_at else ")"))

    # ----------------------------------------------------------------- who writes in place
    def _written(self, key: int, entry: tuple[str, Where, Where]) -> None:
        modified = self.modified
        if len(modified) >= _MODIFIED_LIMIT:
            for old in list(modified)[:_MODIFIED_LIMIT // 2]:  # dicts keep insertion order: the oldest first
                del modified[old]
        self.clock += 1
        modified.pop(key, None)  # re-inserted last: the newest write of this storage
        modified[key] = (*entry, self.clock)

    def on_inplace(self, func: Any, tensor: Tensor) -> None:
        key = _storage_key(tensor)
        if key is None:
            return
        name = getattr(func, "__name__", "an in-place operation")
        running = self.session.running_modules()
        layer = running[-1] if running else None
        defined_at = self.defined.get(layer) if layer is not None else None
        if defined_at is not None:
            self._written(key, (f"`{type(layer).__name__}(inplace=True)`", self.session.op_where(), defined_at))
        else:
            self._written(key, (f"`{name}`", self.session.op_where(), None))

    def on_step_pre(self, optimizer: Any) -> None:
        where = self.session.where()
        entry = (f"{type(optimizer).__name__}.step()", where, None)
        for group in optimizer.param_groups:
            for param in group["params"]:
                key = _storage_key(param)
                if key is not None:
                    self._written(key, entry)
