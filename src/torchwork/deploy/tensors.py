"""Tensors in and out of an artifact: inputs as a tuple, outputs flattened, checked against the schema,
and safetensors files (never pickle).

Example:
    >>> import torch
    >>> from torchwork.deploy.manifest import TensorSpec
    >>> inputs = as_input_tuple(torch.zeros(2, 4, dtype=torch.float64))
    >>> check_inputs(inputs, [TensorSpec("x", "float32", ["batch", 4])])[0].dtype
    torch.float32
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError, ExportError

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.deploy.manifest import TensorSpec


def dtype_name(dtype: Any) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def flatten_outputs(outputs: Any, where: str = "the model") -> list[Any]:
    """A tensor, or (nested) tuples / lists of tensors -> a flat list of tensors, in order."""
    import torch

    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, (tuple, list)):
        return [t for item in outputs for t in flatten_outputs(item, where)]
    raise ConfigError(f"{where} returned a {type(outputs).__name__}; export supports a tensor or a tuple / "
                      "list of tensors as outputs. Return a tuple (e.g. (logits, probabilities)) instead.")


def as_input_tuple(inputs: Any, what: str = "example_inputs") -> tuple[Any, ...]:
    """A tensor / numpy array or a tuple / list of them -> a tuple of CPU tensors."""
    import numpy as np
    import torch

    items = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not items:
        raise ConfigError(f"{what} is empty: pass a tensor or a tuple of tensors (the model's inputs).")
    converted = []
    for index, item in enumerate(items):
        if isinstance(item, np.ndarray):
            item = torch.from_numpy(np.ascontiguousarray(item))
        if not isinstance(item, torch.Tensor):
            raise ConfigError(f"{what}[{index}] is a {type(item).__name__}; export needs tensors (a tensor or a "
                              "tuple of tensors, one per argument of forward()).")
        converted.append(item.detach().cpu())
    return tuple(converted)


def check_inputs(inputs: tuple[Any, ...], schema: Sequence[TensorSpec], any_batch: bool = False) -> tuple[Any, ...]:
    """Check count, dtype and static dims against the manifest; convert within float / within int kinds.

    ``any_batch``: accept any size along dim 0 (data sets, which are fed in the model's batch size later).
    """
    import torch

    if len(inputs) != len(schema):
        names = [s.name for s in schema]
        raise ConfigError(f"the model takes {len(schema)} input(s) {names}, got {len(inputs)}.")
    checked = []
    for tensor, spec in zip(inputs, schema):
        want = getattr(torch, spec.dtype)
        if tensor.dtype != want:
            if tensor.dtype.is_floating_point == want.is_floating_point and tensor.dtype != torch.bool:
                tensor = tensor.to(want)
            else:
                raise ConfigError(f"input {spec.name!r} must be {spec.dtype}, got {dtype_name(tensor.dtype)}.")
        shape = spec.shape
        bad = len(shape) != tensor.ndim or any(isinstance(d, int) and d != s and not (any_batch and axis == 0)
                                               for axis, (d, s) in enumerate(zip(shape, tensor.shape)))
        if bad:
            raise ConfigError(f"input {spec.name!r} must have shape {shape} (names are dynamic dims), got "
                              f"{list(tensor.shape)}.")
        check_bounds(tensor.shape, spec)
        checked.append(tensor)
    return tuple(checked)


def bounds_problem(shape: Sequence[int], spec: TensorSpec) -> str | None:
    """Why an input of ``shape`` is outside the bounds its dynamic dims were exported with (``max_length``),
    or None. ``shape`` is the whole tensor's, batch included; what a server calls on each request.

    Example:
        >>> from torchwork.deploy.manifest import TensorSpec
        >>> spec = TensorSpec("idx", "int64", ["batch", "length"], {"length": [1, 64]})
        >>> bounds_problem([1, 64], spec) is None, bounds_problem([1, 65], spec)[:49]
        (True, "input 'idx' is 65 long along dim 1 (length), over")
    """
    for axis, (low, high) in spec.limits().items():
        if axis < len(shape) and not low <= shape[axis] <= high:
            name = spec.shape[axis]
            if shape[axis] > high:
                return (f"input {spec.name!r} is {shape[axis]} long along dim {axis} ({name}), over the {high} the "
                        f"artifact was exported for (max_length={high}); the model cannot take more. Send at "
                        f"most {high} (a language model: keep the last {high} tokens), or export again with a "
                        "larger max_length if the model allows it.")
            return (f"input {spec.name!r} is {shape[axis]} long along dim {axis} ({name}), under the {low} the "
                    f"artifact was exported for; send at least {low}.")
    return None


def check_bounds(shape: Sequence[int], spec: TensorSpec) -> None:
    """Raise :class:`~torchwork.errors.ConfigError` when :func:`bounds_problem` finds one."""
    problem = bounds_problem(shape, spec)
    if problem is not None:
        raise ConfigError(problem)


def save_tensors(path: Path, tensors: Mapping[str, Any]) -> None:
    """Write named tensors to a safetensors file."""
    from safetensors.torch import save_file

    # clone(): safetensors refuses tensors that share memory (tied weights); loading re-ties them anyway.
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(path))


def load_tensors(path: Path) -> dict[str, Any]:
    """Named tensors from a safetensors file; :class:`~torchwork.errors.ExportError` when it is damaged."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise ExportError(f"{path} is not a readable safetensors file ({error}). Re-export the model.") from error
