"""One device setting: resolve it once, move the model and every batch there.

Example:
    >>> import torch
    >>> from torchwork.engine.devices import resolve_device, move_to_device
    >>> device = resolve_device("cpu")
    >>> batch = {"x": torch.zeros(2), "pair": (torch.ones(1), [torch.ones(1)])}
    >>> moved = move_to_device(batch, device)
    >>> moved["pair"][1][0].device.type
    'cpu'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from torchwork.errors import DeviceError


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """Turn ``"auto"`` (cuda, then mps, then cpu) or any device spec into a ``torch.device``.

    Raises :class:`DeviceError` when the requested device is not available here.
    """
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise DeviceError(f"device={device!r} is not a device name: {error}. Use 'auto', 'cpu', 'cuda', "
                          "'cuda:1' or 'mps'.") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device={device!r} asks for CUDA, but torch.cuda.is_available() is False "
                              f"(torch {torch.__version__}). Use device='auto' to fall back to the CPU.")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise DeviceError(f"device={device!r}: this machine has {torch.cuda.device_count()} CUDA "
                              "device(s). Pick an index below that, or set CUDA_VISIBLE_DEVICES.")
    if resolved.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise DeviceError(f"device={device!r} asks for Apple MPS, which is not available here. "
                              "Use device='auto'.")
    return resolved


def move_to_device(obj: Any, device: torch.device, non_blocking: bool | None = None) -> Any:
    """Move every tensor inside ``obj`` (tuples, lists, dicts, namedtuples, dataclasses) to ``device``.

    ``non_blocking`` defaults to True exactly when the copy can overlap: a pinned CPU tensor going to CUDA.
    Objects with a ``.to`` method (e.g. a Hugging Face ``BatchEncoding``) are moved with it; anything else
    is returned unchanged.
    """
    if isinstance(obj, torch.Tensor):
        if obj.device == device:
            return obj
        blocking = non_blocking if non_blocking is not None else (device.type == "cuda" and obj.is_pinned())
        return obj.to(device, non_blocking=blocking)
    if isinstance(obj, Mapping):
        # A Mapping type built from a dict, as dict, OrderedDict and defaultdict-free mappings are.
        return type(obj)({key: move_to_device(value, device, non_blocking) for key, value in obj.items()})  # type: ignore[call-arg]
    if isinstance(obj, tuple):
        moved = [move_to_device(value, device, non_blocking) for value in obj]
        return type(obj)(*moved) if hasattr(obj, "_fields") else type(obj)(moved)
    if isinstance(obj, list):
        return [move_to_device(value, device, non_blocking) for value in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: move_to_device(getattr(obj, f.name), device, non_blocking)
                   for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    to = getattr(obj, "to", None)
    if callable(to) and not isinstance(obj, (str, bytes)):
        try:
            return to(device)
        except TypeError:
            return obj
    return obj


def batch_size_of(obj: Any) -> int | None:
    """The leading dimension of the first tensor found in ``obj``, or None when it holds no tensor."""
    if isinstance(obj, torch.Tensor):
        return obj.shape[0] if obj.ndim else 1
    if isinstance(obj, Mapping):
        obj = list(obj.values())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    if isinstance(obj, (tuple, list)):
        for value in obj:
            size = batch_size_of(value)
            if size is not None:
                return size
        if obj and isinstance(obj[0], str):
            return len(obj)
    return None


def check_model_on(model: torch.nn.Module, device: torch.device) -> None:
    """Name every parameter or buffer that is not on ``device`` (the error PyTorch gives is far later)."""
    stray = [f"{name} ({tensor.device})" for name, tensor in
             [*model.named_parameters(), *model.named_buffers()] if tensor.device.type != device.type]
    if stray:
        shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise DeviceError(f"the model is meant to run on {device}, but {shown} stayed elsewhere. "
                          "A tensor stored as a plain attribute is not moved by model.to(): register it "
                          "with self.register_buffer(name, tensor) instead.")
