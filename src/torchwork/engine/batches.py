"""How a batch becomes a model call: split it, call the model with it, join outputs back together.

Convention: a batch is an ``(inputs, targets)`` pair. ``inputs`` is passed as ``model(inputs)``, as
``model(*inputs)`` when it is a tuple and as ``model(**inputs)`` when it is a dict.

Example:
    >>> import torch
    >>> from torchwork.engine.batches import call_model, concat_outputs
    >>> call_model(lambda a, b: a + b, (torch.ones(1), torch.ones(1)))
    tensor([2.])
    >>> concat_outputs([torch.zeros(2, 3), torch.zeros(1, 3)]).shape
    torch.Size([3, 3])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from torchwork.data.lengths import length_or_none  # noqa: F401  (re-exported)
from torchwork.errors import BatchError


def describe(obj: Any, depth: int = 0) -> str:
    """A short structural description of a batch, for error messages."""
    if isinstance(obj, torch.Tensor):
        return f"Tensor{tuple(obj.shape)}"
    if depth > 2:
        return type(obj).__name__
    if isinstance(obj, Mapping):
        return "{" + ", ".join(f"{k!r}: {describe(v, depth + 1)}" for k, v in list(obj.items())[:6]) + "}"
    if isinstance(obj, (tuple, list)):
        inner = ", ".join(describe(v, depth + 1) for v in obj[:6])
        return f"({inner})" if isinstance(obj, tuple) else f"[{inner}]"
    return type(obj).__name__


def split_error(batch: Any) -> BatchError:
    return BatchError(
        f"cannot split the batch into (inputs, targets): got {describe(batch)}. Make the Dataset return "
        "(inputs, target) pairs, or pass step_fn=lambda model, batch: loss to Trainer to compute the loss "
        "from the batch yourself.")


def call_model(model: Callable[..., Any], inputs: Any) -> Any:
    """``model(*inputs)`` for a tuple, ``model(**inputs)`` for a dict, else ``model(inputs)``."""
    if type(inputs) is tuple:
        return model(*inputs)
    if isinstance(inputs, Mapping):
        return model(**inputs)
    return model(inputs)


def inputs_of(batch: Any) -> Any:
    """The inputs of a prediction batch: ``batch[0]`` of a pair or 1-tuple, else the batch itself."""
    if isinstance(batch, (tuple, list)) and not hasattr(batch, "_fields") and len(batch) in (1, 2):
        if len(batch) == 2 and isinstance(batch[0], str):
            return batch  # a list of two texts is inputs, not a pair
        return batch[0]
    return batch


def concat_outputs(outputs: list[Any]) -> Any:
    """Join per-batch outputs along dimension 0 (tensors, and dicts / tuples of tensors)."""
    if not outputs:
        return []
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([o.reshape(1) if o.ndim == 0 else o for o in outputs])
    if isinstance(first, Mapping):
        return {key: concat_outputs([o[key] for o in outputs]) for key in first}
    if isinstance(first, tuple):
        joined = [concat_outputs([o[i] for o in outputs]) for i in range(len(first))]
        return type(first)(*joined) if hasattr(first, "_fields") else tuple(joined)
    if isinstance(first, list):
        return [item for o in outputs for item in o]
    return outputs
