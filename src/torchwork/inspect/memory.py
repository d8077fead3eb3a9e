"""What backward keeps alive, measured independently: every tensor packed by autograd during a forward.

``torch.autograd.graph.saved_tensors_hooks`` sees each tensor as autograd saves it. Storages are counted
once; the parameters' own storage is left out (it is alive anyway). This is the CPU measurement the
graph's saved-tensor figures are checked against (on a GPU, ``torch.cuda.max_memory_allocated`` measures
the same thing with the allocator's rounding).

Example:
    >>> import torch
    >>> from torchwork.inspect import measure_saved_bytes
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
    >>> out, measured, _ = measure_saved_bytes(lambda: model(torch.ones(2, 4)), model)
    >>> measured  # the input (2x4 floats, for the weight's gradient) and tanh's result (2x8)
    {'total': 96, 'by_module': {'0': 32, '1': 64}}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchwork.inspect.recording import Capture, capture
from torchwork.inspect.walk import storage_key


def measure_saved_bytes(run: Callable[[], Any], model: torch.nn.Module | None = None,
                        ) -> tuple[Any, dict[str, Any], Capture]:
    """Call ``run()`` (a forward) and return (its result, {"total", "by_module"} saved bytes, the capture)."""
    params = {storage_key(p) for p in model.parameters() if p.numel()} if model is not None else set()
    seen: set[tuple[str, int]] = set()
    by_module: dict[str, int] = {}

    with capture(model) as cap:
        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()
            key = storage_key(tensor)
            if storage.nbytes() and key not in seen and key not in params:
                seen.add(key)
                module = cap.current_module() or ""
                by_module[module] = by_module.get(module, 0) + storage.nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            result = run()
    return result, {"total": sum(by_module.values()), "by_module": by_module}, cap
