"""The autograd graph made visible: why a gradient is None, and what backward keeps alive.

* :func:`graph` walks ``output.grad_fn``: nodes with the file:line that made them, leaves (parameters by
  name), the tensors saved for backward (bytes per module), and the parameters that will get no gradient
  with the reason (:attr:`Graph.unreached`).
* :func:`capture` records a forward pass so that lines and reasons are known; :func:`trace` does both for
  a model and inputs.
* ``Graph.to_html(path)``, ``Graph.to_dot()``, ``print(graph)``; ``torchwork graph SCRIPT.py`` on the
  command line.

Importing ``torchwork.inspect`` does not import torch.

Example:
    >>> import torch
    >>> from torchwork.inspect import trace
    >>> g = trace(torch.nn.Linear(3, 2), torch.ones(4, 3))
    >>> [leaf.name for leaf in g.leaves]
    ['bias', 'weight']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_attributes

_LAZY = {
    "graph": "torchwork.inspect.graphs",
    "Graph": "torchwork.inspect.graphs",
    "Reason": "torchwork.inspect.graphs",
    "capture": "torchwork.inspect.recording",
    "Capture": "torchwork.inspect.recording",
    "trace": "torchwork.inspect.tracing",
    "measure_saved_bytes": "torchwork.inspect.memory",
}
__all__ = ["Capture", "Graph", "Reason", "capture", "graph", "measure_saved_bytes", "trace"]

# Type checkers read the imports (and flag a misspelt name); at run time each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.inspect.graphs import Graph, Reason, graph
    from torchwork.inspect.memory import measure_saved_bytes
    from torchwork.inspect.recording import Capture, capture
    from torchwork.inspect.tracing import trace
else:
    __getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())
