"""Which of a model's outputs an export keeps: all of them when they are tensors, else the one chosen.

A language model's ``forward(idx, targets=None)`` returns ``(logits, loss)``, the loss ``None`` at inference;
a Hugging Face style model returns a dict. Neither is a tensor or a tuple of tensors, so exporting one needs
``output=`` (``export(..., output=0)``, ``torchwork export --select-output 0``): an index into the tuple, or
a key of the dict or a field of the named tuple. Without one, the error lists what ``forward`` returned.

Example:
    >>> import torch
    >>> describe_outputs((torch.zeros(2, 5, 7), None))
    ['[0] tensor float32 [2, 5, 7]', '[1] None']
    >>> pick_output({"logits": torch.zeros(1, 3), "loss": None}, "logits").shape
    torch.Size([1, 3])
    >>> pick_output((torch.zeros(1),), 3)
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: output=3: forward() returns 1 output(s): [0] tensor float32 [1]. Pick one by its index (output=0, --select-output 0) or, for a dict or a named tuple, its key (output='logits').
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from torchwork.errors import ConfigError

_HOW = ("Pick one by its index (output=0, --select-output 0) or, for a dict or a named tuple, its key "
        "(output='logits').")


def _entries(outputs: Any) -> list[tuple[str, Any]]:
    """``(label, value)`` per output: ``[i]`` for a tuple or list, ``'key'`` for a dict or a named tuple."""
    import torch

    if isinstance(outputs, torch.Tensor):
        return [("[0]", outputs)]
    if isinstance(outputs, Mapping):
        return [(repr(key), value) for key, value in outputs.items()]
    if isinstance(outputs, tuple) and hasattr(outputs, "_fields"):
        return [(f"[{i}] {name!r}", value) for i, (name, value) in enumerate(zip(outputs._fields, outputs))]
    if isinstance(outputs, (tuple, list)):
        return [(f"[{i}]", value) for i, value in enumerate(outputs)]
    return [("", outputs)]


def _kind(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return f"a {type(value).__name__} of {len(value)} tensors"
    return "None" if value is None else type(value).__name__


def describe_outputs(outputs: Any) -> list[str]:
    """One line per output of ``forward``: its index or key and what it is."""
    return [f"{label} {_kind(value)}".strip() for label, value in _entries(outputs)]


def _refusal(outputs: Any, what: str) -> ConfigError:
    entries = describe_outputs(outputs)
    return ConfigError(f"{what}: forward() returns {len(entries)} output(s): {'; '.join(entries)}. {_HOW}")


def all_tensors(outputs: Any) -> bool:
    """A tensor, or (nested) tuples / lists of tensors: what an export keeps whole."""
    import torch

    if isinstance(outputs, torch.Tensor):
        return True
    return isinstance(outputs, (tuple, list)) and all(all_tensors(item) for item in outputs)


def check_outputs(outputs: Any) -> None:
    """Refuse outputs that are not all tensors (``(logits, None)``, a dict) with the list of them."""
    if not all_tensors(outputs):
        raise _refusal(outputs, "the model's outputs are not all tensors, so they cannot all be exported")


def pick_output(outputs: Any, choice: int | str) -> Any:
    """The output named by ``choice`` (an index, or a key / named-tuple field); refused with the list."""
    import torch

    if isinstance(outputs, torch.Tensor) and choice == 0:
        return outputs
    if isinstance(choice, str):
        if isinstance(outputs, Mapping) and choice in outputs:
            picked = outputs[choice]
        elif isinstance(outputs, tuple) and choice in getattr(outputs, "_fields", ()):
            picked = getattr(outputs, choice)
        else:
            raise _refusal(outputs, f"output={choice!r}")
    elif isinstance(outputs, (tuple, list)) and choice < len(outputs):
        picked = outputs[choice]
    else:
        raise _refusal(outputs, f"output={choice!r}")
    if not all_tensors(picked):
        raise _refusal(outputs, f"output={choice!r} is {_kind(picked)} here, not a tensor")
    return picked


def select_output(model: Any, choice: int | str, names: Sequence[str]) -> Any:
    """``model`` returning only its output ``choice``, taking the positional inputs ``names``: what is exported
    and checked. A shallow copy whose ``forward`` picks the output: the same parameters, buffers and submodules
    under the same names, so the exported programs and ``weights.safetensors`` name them as the model does."""
    selected = copy.copy(model)
    unbound = type(model).forward

    def forward(*args: Any) -> Any:
        return pick_output(unbound(selected, *args), choice)

    # torch.export matches dynamic_shapes (one entry per input) to forward's parameters, which *args hides
    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
    selected.forward = forward
    return selected
