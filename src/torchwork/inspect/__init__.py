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

from torchwork.lazy import lazy_package

# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.lazy_package reads them back and each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.inspect.graphs import Graph, Reason, graph  # noqa: F401
    from torchwork.inspect.memory import measure_saved_bytes  # noqa: F401
    from torchwork.inspect.recording import Capture, capture  # noqa: F401
    from torchwork.inspect.tracing import trace  # noqa: F401

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
