"""The autograd graph behind one tensor, as data: nodes, edges, leaves, saved tensors, unreached parameters.

Example:
    >>> import torch
    >>> from torchwork.inspect import capture, graph
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    >>> with capture(model) as cap:
    ...     loss = model(torch.randn(16, 4)).pow(2).mean()
    >>> g = graph(loss, model, capture=cap)
    >>> [node.op for node in g.nodes]
    ['MeanBackward0', 'PowBackward0', 'AddmmBackward0', 'TanhBackward0', 'AddmmBackward0', 'TBackward0', 'TBackward0']
    >>> g.saved_by_module()  # the input 16x4, tanh's result 16x8 (also the last layer's input), pow's input
    {'0': 256, '1': 512, '': 64}
    >>> g.unreached
    {}
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from torchwork.inspect.recording import ORIGIN_KEY, Capture, Where, active_capture
from torchwork.inspect.walk import reached_leaves, saved_slots, storage_key, walk_nodes


@dataclass
class Node:
    """One backward operation: its PyTorch name, where its forward ran, and the module running then."""

    id: int
    op: str
    where: Where | None
    source: str | None  # "torchwork" (traced during capture), "pytorch" (anomaly-mode traceback) or None
    module: str | None
    inputs: list[int] = field(default_factory=list)  # ids of the nodes / leaves it sends gradients to


@dataclass
class Leaf:
    """A tensor the gradient stops at: a parameter (by name) or another tensor with requires_grad."""

    id: int
    name: str
    shape: tuple[int, ...]
    is_parameter: bool


@dataclass
class Saved:
    """One block of memory that backward keeps alive (storages shared by several nodes counted once)."""

    shape: tuple[int, ...]
    dtype: str
    bytes: int
    nodes: list[int]  # the nodes that saved it, the first one owning it
    attribute: str  # e.g. "mat1", "result"
    module: str | None
    parameter: str | None  # the leaf (a parameter, or an input with requires_grad) whose storage this is:
    #                        alive anyway, so not counted as activation memory; else None
    stale: str | None = None  # PyTorch's message when it was modified in place after being saved
    modified_at: Where | None = None  # the in-place operation that modified it, when captured


@dataclass(frozen=True)
class Reason:
    """Why a parameter will get no gradient from this output; ``kind`` is one of :data:`REASON_KINDS`."""

    kind: str
    text: str
    where: Where | None = None

    def __str__(self) -> str:
        return self.text


REASON_KINDS = ("frozen", "cut", "no_grad", "unconnected", "unused", "unknown")


@dataclass
class Graph:
    """The autograd graph behind one output; ``print(graph)`` for a summary, :meth:`to_html` to look at it."""

    root: int | None
    nodes: list[Node]
    leaves: list[Leaf]
    saved: list[Saved]
    unreached: dict[str, Reason]
    output_shape: tuple[int, ...] = ()

    @property
    def edges(self) -> list[tuple[int, int]]:
        """(node, input) pairs, in the direction gradients flow."""
        return [(node.id, target) for node in self.nodes for target in node.inputs]

    @property
    def saved_bytes(self) -> int:
        """Bytes of activations backward keeps alive (parameters' own storage excluded)."""
        return sum(s.bytes for s in self.saved if s.parameter is None)

    def saved_by_module(self, include_parameters: bool = False) -> dict[str, int]:
        """Saved bytes per module (the module that was running when the saving node was made); ``''`` for
        operations outside any module."""
        totals: dict[str, int] = {}
        for item in self.saved:
            if item.parameter is None or include_parameters:
                key = item.module or ""
                totals[key] = totals.get(key, 0) + item.bytes
        return totals

    def modules(self) -> list[str]:
        """The modules that made nodes, in the order their first node appears."""
        seen: dict[str, None] = {}
        for node in self.nodes:
            seen.setdefault(node.module or "", None)
        return list(seen)

    def to_dot(self) -> str:
        """Graphviz source: nodes coloured and clustered by module, leaves as boxes."""
        from torchwork.inspect.render import to_dot

        return to_dot(self)

    def to_html(self, path: str | os.PathLike[str], use_dot: bool | None = None) -> str:
        """Write one self-contained page (opens offline) to ``path``; ``use_dot=False`` skips Graphviz."""
        from torchwork.inspect.page import write_html

        return write_html(self, path, use_dot)

    def summary(self) -> str:
        from torchwork.inspect.render import text_summary

        return text_summary(self)

    def __str__(self) -> str:
        return self.summary()


def graph(output: torch.Tensor, model: torch.nn.Module | None = None, *, capture: Capture | None = None) -> Graph:
    """The autograd graph behind ``output``; with ``model`` (default: the models the capture saw run), the
    parameters it will not reach and why.

    Run the forward under :func:`torchwork.inspect.capture` for the file:line of each node and the reason
    of each unreached parameter; without it, lines come from anomaly mode's records when it was on.
    """
    from torchwork.errors import ConfigError

    if not isinstance(output, torch.Tensor):
        raise ConfigError(f"inspect.graph needs a tensor (the loss or an output), got {type(output).__name__}.")
    capture = capture if capture is not None else active_capture()
    names = capture.parameter_names() if capture is not None else {}
    models = [model] if model is not None else capture.models() if capture is not None else []
    named = [(n, p) for m in models for n, p in m.named_parameters()]
    names.update({id(p): n for n, p in named})
    nodes: list[Node] = []
    leaves: list[Leaf] = []
    ids: dict[int, int] = {}
    raw_nodes = list(walk_nodes(output))
    for raw in raw_nodes:
        ids[id(raw)] = len(ids)
    param_storage: dict[tuple[str, int], str] = {}
    for raw in raw_nodes:
        index = ids[id(raw)]
        variable = getattr(raw, "variable", None)
        if variable is not None:
            name = names.get(id(variable))
            leaves.append(Leaf(index, name or f"tensor{tuple(variable.shape)}", tuple(variable.shape),
                               name is not None))
            if variable.numel():
                param_storage[storage_key(variable)] = leaves[-1].name
            continue
        where, source, module = _origin(raw)
        nodes.append(Node(index, _op_name(raw), where, source, module,
                          [ids[id(n)] for n, _ in raw.next_functions if n is not None and id(n) in ids]))
    for name, param in named:  # a parameter saved by the graph but not reached (no grad) is still a parameter
        if param.numel():
            param_storage.setdefault(storage_key(param), name)
    saved = _saved(raw_nodes, ids, {n.id: n for n in nodes}, param_storage, capture)
    unreached = _unreached(output, named, capture)
    root = ids.get(id(output.grad_fn)) if output.grad_fn is not None else None
    return Graph(root, nodes, leaves, saved, unreached, tuple(output.shape))


def _op_name(raw: Any) -> str:
    name = raw.name()
    return name.rsplit("::", 1)[-1] if name.startswith("torch::") else name


_TRACEBACK_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def _origin(raw: Any) -> tuple[Where | None, str | None, str | None]:
    meta = raw.metadata
    origin = meta.get(ORIGIN_KEY)
    if origin is not None:
        file, line, module = origin
        return ((file, line) if file else None), "torchwork", module
    trace = meta.get("traceback_")
    if trace:
        frames = [(f, int(n)) for f, n in _TRACEBACK_LINE.findall("".join(trace) if isinstance(trace, list)
                                                                   else str(trace))]
        torch_dir = os.path.dirname(torch.__file__)
        outside = [f for f in frames if not f[0].startswith(torch_dir)]
        if outside:
            return outside[-1], "pytorch", None
    return None, None, None


def _saved(raw_nodes: list[Any], ids: dict[int, int], nodes: dict[int, Node],
           param_storage: dict[tuple[str, int], str], capture: Capture | None) -> list[Saved]:
    by_storage: dict[tuple[str, int], Saved] = {}
    order = sorted((r for r in raw_nodes if not hasattr(r, "variable")), key=_sequence)
    for raw in order:
        node = nodes[ids[id(raw)]]
        for slot in saved_slots(raw):
            tensor = slot.tensor
            if tensor.numel() == 0 and not tensor.untyped_storage().nbytes():
                continue
            key = storage_key(tensor)
            existing = by_storage.get(key)
            if existing is not None:
                if node.id not in existing.nodes:
                    existing.nodes.append(node.id)
                existing.stale = existing.stale or slot.stale
                continue
            by_storage[key] = Saved(tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""),
                                    tensor.untyped_storage().nbytes(), [node.id], slot.attribute, node.module,
                                    param_storage.get(key), slot.stale)
    items = list(by_storage.values())
    if capture is not None:
        for key, item in by_storage.items():
            if item.stale:
                item.modified_at = next((op.where for op in capture.inplace if op.storage == key), None)
    return items


def _sequence(raw: Any) -> int:
    try:
        return raw._sequence_nr()
    except (AttributeError, RuntimeError):
        return 0


def _unreached(output: torch.Tensor, named: list[tuple[str, torch.nn.Parameter]],
               capture: Capture | None) -> dict[str, Reason]:
    from torchwork.locations import format_where

    reached = reached_leaves(output)
    cut_reach: list[tuple[str, Where | None, set[int]]] = []
    if capture is not None:
        for cut in capture.cuts:
            if cut.root is None:
                continue
            cut_reach.append((cut.label, cut.where, reached_leaves(cut.root)))
    result: dict[str, Reason] = {}
    seen: set[int] = set()
    for name, param in named:
        pid = id(param)
        if pid in reached or pid in seen:
            continue
        seen.add(pid)
        if not param.requires_grad:
            result[name] = Reason("frozen", "requires_grad=False: autograd never tracks it")
            continue
        if capture is None:
            result[name] = Reason("unknown", "not reached from this output (run the forward under "
                                             "torchwork.inspect.capture() to learn why)")
            continue
        cut_by = next(((label, where) for label, where, leaves in cut_reach if pid in leaves), None)
        use = capture.uses.get(pid)
        if cut_by is not None:
            result[name] = Reason("cut", f"cut by {cut_by[0]} at {format_where(cut_by[1])}", cut_by[1])
        elif pid in capture.no_grad_modules or (use is not None and use.with_grad is None):
            where = capture.no_grad_modules.get(pid) or (use.without_grad if use else None)
            result[name] = Reason("no_grad", f"used only under no_grad/inference_mode, at {format_where(where)}",
                                  where)
        elif use is not None:
            result[name] = Reason("unconnected", f"used at {format_where(use.with_grad)}, but that result does "
                                                 "not reach this output", use.with_grad)
        else:
            result[name] = Reason("unused", "never used in forward")
    return result

