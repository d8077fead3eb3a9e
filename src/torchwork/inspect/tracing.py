"""One call for a model alone: run its forward under a capture and return the graph of its output.

Example:
    >>> import torch
    >>> from torchwork.inspect import trace
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    >>> g = trace(model, torch.ones(2, 3))
    >>> sorted({node.module for node in g.nodes})
    ['0', '1']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchwork.inspect.graphs import Graph, graph
from torchwork.inspect.recording import capture


def first_tensor_with_grad(value: Any) -> torch.Tensor | None:
    """The first tensor with a history in a forward output (a tensor, a tuple/list/dict, a ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return value if value.grad_fn is not None or value.requires_grad else None
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for item in items:
        found = first_tensor_with_grad(item)
        if found is not None:
            return found
    return None


def trace(model: torch.nn.Module, *inputs: Any, loss: Callable[[Any], torch.Tensor] | None = None,
          **kwargs: Any) -> Graph:
    """``graph(loss(model(*inputs, **kwargs)), model)`` with the forward captured.

    ``loss`` maps the forward's output to the tensor to inspect (default: the output, or its first tensor
    that has a history).
    """
    from torchwork.errors import ConfigError

    with capture(model) as cap:
        out = model(*inputs, **kwargs)
        target = loss(out) if loss is not None else first_tensor_with_grad(out)
    if not isinstance(target, torch.Tensor):
        raise ConfigError(f"{type(model).__name__}'s output has no tensor with an autograd history; pass "
                          "loss=... to choose the tensor to inspect, and check that no parameter requires grad "
                          "is False everywhere and that the forward does not run under no_grad.")
    result = graph(target, model, capture=cap)
    cap.release()
    return result
