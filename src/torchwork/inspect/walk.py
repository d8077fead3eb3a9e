"""Walking an autograd graph: the nodes behind a tensor, the leaves they reach, the tensors they saved.

This is the one graph walk of torchwork: :mod:`torchwork.inspect` builds its :class:`Graph` from it, and
the doctor's ``broken-graph`` check uses :func:`reached_leaves` to tell which parameters a loss reaches.

Example:
    >>> import torch
    >>> w = torch.ones(3, requires_grad=True)
    >>> y = (w * 2).sigmoid().sum()
    >>> [node.name() for node in walk_nodes(y)]
    ['SumBackward0', 'SigmoidBackward0', 'MulBackward0', 'torch::autograd::AccumulateGrad']
    >>> reached_leaves(y) == {id(w)}
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

MAX_NODES = 200_000
# The operations that hand values out of autograd, as a user would write them.
CUT_LABELS = {"detach": ".detach()", "detach_": ".detach_()", "data": ".data", "item": ".item()",
              "__float__": "float(tensor)", "__int__": "int(tensor)", "tolist": ".tolist()", "numpy": ".numpy()",
              "tensor": "torch.tensor(tensor)", "new_tensor": ".new_tensor(tensor)"}


def walk_nodes(start: Any, limit: int = MAX_NODES) -> Iterator[Any]:
    """Each autograd node behind ``start`` (a tensor, or a node) once, depth first (at most ``limit``)."""
    root = start.grad_fn if isinstance(start, torch.Tensor) else start
    if root is None:
        return
    seen: set[int] = set()
    stack = [root]
    while stack and len(seen) < limit:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        for next_node, _ in reversed(node.next_functions):
            if next_node is not None and id(next_node) not in seen:
                stack.append(next_node)


def reached_leaves(start: Any, wanted: set[int] | None = None, limit: int = MAX_NODES) -> set[int]:
    """ids of the leaf tensors (parameters, inputs with ``requires_grad``) that the graph behind ``start``
    (a tensor, or a node) reaches. With ``wanted``, the walk stops as soon as all of them are found.
    """
    found: set[int] = set()
    if isinstance(start, torch.Tensor) and start.grad_fn is None:
        if start.requires_grad:
            found.add(id(start))
        return found
    for node in walk_nodes(start, limit):
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.add(id(variable))
            if wanted is not None and wanted <= found:
                break
    return found


@dataclass
class SavedSlot:
    """One tensor a node saved for backward: the node, the attribute, the tensor, and whether it is stale."""

    node: Any
    attribute: str
    tensor: torch.Tensor
    stale: str | None  # PyTorch's message when the tensor was modified in place after it was saved


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def _saved_names(node: Any) -> tuple[str, ...]:
    kind = type(node)
    names = _SAVED_NAMES.get(kind)
    if names is None:
        names = tuple(a[len("_raw_saved_"):] for a in dir(node) if a.startswith("_raw_saved_"))
        _SAVED_NAMES[kind] = names
    return names


def saved_slots(node: Any) -> list[SavedSlot]:
    """The tensors ``node`` keeps for its backward (``_raw_saved_*``), read without unpacking hooks."""
    slots: list[SavedSlot] = []
    for name in _saved_names(node):
        try:
            raw = getattr(node, "_raw_saved_" + name)
        except RuntimeError:  # already freed by a backward pass
            continue
        items = raw if isinstance(raw, (list, tuple)) else [raw]
        for index, item in enumerate(items):
            try:
                tensor = item.data
            except (AttributeError, RuntimeError):
                continue
            if not isinstance(tensor, torch.Tensor):
                continue
            label = name if len(items) == 1 else f"{name}[{index}]"
            slots.append(SavedSlot(node, label, tensor, _stale(node, name)))
    return slots


def _stale(node: Any, name: str) -> str | None:
    try:
        getattr(node, "_saved_" + name)
    except RuntimeError as error:
        text = str(error)
        if "inplace operation" in text:
            return text.split(" Hint:")[0]
    return None


def storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    """What identifies the memory a tensor keeps alive: its storage's device and address."""
    return str(tensor.device), tensor.untyped_storage().data_ptr()
