"""Recording a forward pass for :func:`torchwork.inspect.graph`: where each node was made, and what cut it.

While a :class:`Capture` is active, one ``TorchFunctionMode`` sees every call of the torch API and global
module (pre-)hooks keep the stack of running modules. For each autograd node an operation creates, it
stores ``(file, line, module)`` in the node's own ``metadata`` dict (PyTorch's place for per-node data, so
the record lives and dies with the node); it also notes the operations that leave autograd (``.detach()``,
``.data``, ``.item()``, ``.numpy()``, ...), the modules that ran with autograd off, where each parameter was
used, and the in-place operations. Nothing in the user's code is edited; the hooks are removed on exit.

The line recorded is the innermost frame outside torch and torchwork: the user's line for the user's own
model, the library's line for a library model (``modeling_bert.py:...``).

Example:
    >>> import torch
    >>> from torchwork.inspect import capture, graph
    >>> model = torch.nn.Linear(3, 1)
    >>> with capture(model) as cap:
    ...     loss = model(torch.ones(2, 3)).sum()
    >>> graph(loss, model, capture=cap).nodes[0].op
    'SumBackward0'
"""

from __future__ import annotations

import os
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from torchwork.inspect.walk import CUT_LABELS, storage_key

# torchwork/__init__.py, found from this file rather than by importing the package (a lower layer never
# imports the public API above it).
TORCHWORK_INIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__init__.py")


ORIGIN_KEY = "torchwork_origin"  # node.metadata[ORIGIN_KEY] = (file, line, module)
_MAX_EVENTS = 64
_INPLACE_DUNDERS = frozenset({"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
                              "__iand__", "__ior__", "__ixor__", "__setitem__"})
_ACTIVE: list[Capture] = []
# Questions about a tensor, not computations with it (``torch.nn.init`` asks them of a weight in a constructor)
_METADATA = frozenset({"dim", "ndimension", "size", "numel", "nelement", "stride", "element_size", "storage_offset",
                       "is_contiguous", "is_floating_point", "is_complex", "get_device", "data_ptr", "__len__",
                       "__repr__", "__format__", "__hash__", "untyped_storage"})

Where = tuple[str, int]


def _library_dirs() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.path.realpath(torch.__file__)), os.path.dirname(os.path.realpath(TORCHWORK_INIT))}
    return tuple(d + os.sep for d in dirs)


@dataclass
class Cut:
    """An operation that handed a value out of autograd while its input still had a history."""

    label: str
    where: Where | None
    root: Any  # the input's grad_fn (kept until the graph is built), or the leaf tensor itself


@dataclass
class Use:
    """Where a parameter was first used, with autograd on and with it off."""

    with_grad: Where | None = None
    without_grad: Where | None = None


@dataclass
class InplaceOp:
    op: str
    where: Where | None
    storage: tuple[str, int]


@dataclass
class Capture:
    """What one forward pass recorded; use as ``with capture(model) as cap:``, then ``graph(out, capture=cap)``."""

    model: torch.nn.Module | None = None
    module_names: dict[int, str] = field(default_factory=dict)  # id(module) -> qualified name
    cuts: list[Cut] = field(default_factory=list)
    uses: dict[int, Use] = field(default_factory=dict)  # id(parameter) -> Use
    no_grad_modules: dict[int, Where | None] = field(default_factory=dict)  # id(parameter) -> call site
    inplace: list[InplaceOp] = field(default_factory=list)
    on_output: Callable[[torch.Tensor, Where], None] | None = None  # each new node's tensor and its line
    on_backward: Callable[[torch.Tensor], None] | None = None  # called before each tensor.backward()
    stopped: bool = False  # set to stop recording (the hooks stay until exit, passing everything through)

    def __post_init__(self) -> None:
        self._stack: list[torch.nn.Module] = []
        self.errors: list[str] = []
        self._roots: weakref.WeakValueDictionary[int, torch.nn.Module] = weakref.WeakValueDictionary()
        self._handles: list[Any] = []
        self._mode: _CaptureMode | None = None
        self._libraries = _library_dirs()
        self._library_cache: dict[str, bool] = {}
        if self.model is not None:
            self._learn_names(self.model)

    # ------------------------------------------------------------------ names
    def _learn_names(self, root: torch.nn.Module) -> None:
        if id(root) in self._roots:
            return
        self._roots[id(root)] = root
        for name, sub in root.named_modules():
            self.module_names.setdefault(id(sub), name or type(root).__name__)

    def models(self) -> list[torch.nn.Module]:
        """The outermost modules seen running that hold parameters (or the model given)."""
        if self.model is not None:
            return [self.model]
        return [m for m in list(self._roots.values()) if next(m.parameters(), None) is not None]

    def parameter_names(self) -> dict[int, str]:
        """id(parameter) -> qualified name, over the models seen running (or the one given)."""
        names: dict[int, str] = {}
        for root in list(self._roots.values()):
            for name, param in root.named_parameters():
                names.setdefault(id(param), name)
        return names

    def current_module(self) -> str | None:
        if not self._stack:
            return None
        module = self._stack[-1]
        return self.module_names.get(id(module), type(module).__name__)

    # ------------------------------------------------------------------ where
    def where(self) -> Where | None:
        """The innermost frame outside torch and torchwork (the code that asked for the operation)."""
        frame: types.FrameType | None = sys._getframe(1)
        cache = self._library_cache
        while frame is not None:
            filename = frame.f_code.co_filename
            library = cache.get(filename)
            if library is None:
                real = os.path.realpath(filename) if not filename.startswith("<") else filename
                library = cache[filename] = real.startswith(self._libraries) or filename.startswith("<frozen")
            if not library:
                return filename, frame.f_lineno
            frame = frame.f_back
        return None

    # ------------------------------------------------------------------ events
    def record_output(self, out: Any) -> None:
        tensors = out if isinstance(out, (tuple, list)) else (out,)
        where: Where | None = None
        for tensor in tensors:
            node = getattr(tensor, "grad_fn", None) if isinstance(tensor, torch.Tensor) else None
            if node is None or ORIGIN_KEY in node.metadata:
                continue
            if where is None:
                where = self.where()
            origin = (where[0], where[1], self.current_module()) if where else (None, None, self.current_module())
            _mark_new_nodes(node, origin)
            if self.on_output is not None and where is not None:
                self.on_output(tensor, where)

    def record_uses(self, args: tuple, grad_on: bool) -> None:
        for arg in args:
            if isinstance(arg, torch.nn.Parameter):
                use = self.uses.get(id(arg))
                if use is None:
                    use = self.uses[id(arg)] = Use()
                if grad_on and use.with_grad is None:
                    use.with_grad = self.where()
                elif not grad_on and use.without_grad is None:
                    use.without_grad = self.where()

    def record_cut(self, name: str, tensor: torch.Tensor) -> None:
        if len(self.cuts) >= _MAX_EVENTS or not tensor.requires_grad:
            return
        root = tensor.grad_fn if tensor.grad_fn is not None else tensor
        self.cuts.append(Cut(CUT_LABELS.get(name, name), self.where(), root))

    def record_inplace(self, name: str, tensor: torch.Tensor) -> None:
        if len(self.inplace) < _MAX_EVENTS and (tensor.requires_grad or tensor.grad_fn is not None):
            self.inplace.append(InplaceOp(name, self.where(), storage_key(tensor)))

    # ------------------------------------------------------------------ module hooks
    def _module_pre(self, module: torch.nn.Module, args: tuple) -> None:
        if self.stopped:
            return
        if not self._stack:
            self._learn_names(module)
        self._stack.append(module)
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            where = None
            for param in module.parameters(recurse=False):
                if id(param) not in self.no_grad_modules:
                    where = where or self.where()
                    self.no_grad_modules[id(param)] = where

    def _module_post(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if self._stack and self._stack[-1] is module:
            self._stack.pop()
        elif module in self._stack:  # a forward that raised: unwind to it
            del self._stack[self._stack.index(module):]

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Capture:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._module_pre),
                         register_module_forward_hook(self._module_post, always_call=True)]
        self._mode = _CaptureMode(self)
        self._mode.__enter__()
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()

    def fail(self, error: Exception) -> None:
        """Stop recording after an internal error (kept in ``errors``); the user's code runs on."""
        self.errors.append(f"{type(error).__name__}: {error}")
        self.stopped = True

    def release(self) -> None:
        """Drop the references to cut graphs (once the graph is built)."""
        for item in self.cuts:
            item.root = None


def _mark_new_nodes(node: Any, origin: tuple) -> None:
    """Mark ``node`` and the unmarked nodes behind it (made inside the same call) with ``origin``."""
    stack = [node]
    budget = 256
    while stack and budget:
        item = stack.pop()
        budget -= 1
        meta = item.metadata
        if ORIGIN_KEY in meta or hasattr(item, "variable"):
            continue
        meta[ORIGIN_KEY] = origin
        stack.extend(n for n, _ in item.next_functions if n is not None)


def active_capture() -> Capture | None:
    """The innermost capture now running, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def capture(model: torch.nn.Module | None = None, **options: Any) -> Capture:
    """Record the forward passes run inside ``with capture(model) as cap:`` for :func:`graph`."""
    return Capture(model, **options)


class _CaptureMode(TorchFunctionMode):
    def __init__(self, owner: Capture) -> None:
        super().__init__()
        self.owner = owner
        self.kinds: dict[Any, str] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        kind = self.kinds.get(func)
        if kind is None:
            kind = _kind(func)
            try:
                self.kinds[func] = kind
            except TypeError:
                pass
        owner = self.owner
        if kind == "attr" or owner.stopped:
            return func(*args, **kwargs)
        if kind == "backward":
            if owner.on_backward is not None and args and isinstance(args[0], torch.Tensor):
                owner.on_backward(args[0])
            return func(*args, **kwargs)
        try:
            if kind in ("cut", "data") and args and isinstance(args[0], torch.Tensor):
                owner.record_cut("data" if kind == "data" else func.__name__, args[0])
            elif kind == "inplace" and args and isinstance(args[0], torch.Tensor):
                owner.record_inplace(func.__name__, args[0])
            if kind != "data":
                # an in-place call writes its first argument (``torch.nn.init.kaiming_uniform_(weight)`` in a
                # constructor, ``weight.zero_()``): a write is not a use; its other arguments are used
                owner.record_uses(args[1:] if kind == "inplace" else args,
                                  torch.is_grad_enabled() and not torch.is_inference_mode_enabled())
        except Exception as error:  # a bug in the recording must not break the user's forward
            owner.fail(error)
        out = func(*args, **kwargs)
        if kind != "data":
            try:
                owner.record_output(out)
            except Exception as error:
                owner.fail(error)
        return out


def _kind(func: Any) -> str:
    name = getattr(func, "__name__", "") or ""
    if name in ("__get__", "__set__", "__delete__"):
        owner = getattr(func, "__self__", None)
        return "data" if name == "__get__" and getattr(owner, "__name__", None) == "data" else "attr"
    if name in _METADATA:
        return "attr"
    if name == "backward":
        return "backward"
    if name in CUT_LABELS:
        return "cut"
    if (name.endswith("_") and not name.startswith("_")) or name in _INPLACE_DUNDERS:
        return "inplace"
    return "op"
