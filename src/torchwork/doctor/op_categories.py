"""Which torch functions the doctor's ``TorchFunctionMode`` hands to which checks: each function object's
category (in place, random, a graph break, no values worth checking, backward, an attribute access, a
possibly in-place functional, a sum), decided once from its name and cached by the mode.

Example:
    >>> from torchwork.doctor.op_categories import INPLACE, NO_VALUES, RANDOM, category
    >>> bool(category("add_") & INPLACE), bool(category("dropout") & RANDOM), bool(category("view") & NO_VALUES)
    (True, True, True)
"""

from __future__ import annotations

import inspect
from typing import Any

# Operation categories, decided once per function object.
INPLACE, RANDOM, BREAK, NO_VALUES, BACKWARD, ATTR, MAYBE_INPLACE, ADD = 1, 2, 4, 8, 16, 32, 64, 128
NAMED = 256  # a name some check watches (its ``ops``): handed to that check's ``on_op``
# Sums: where a running total can keep every step's autograd graph alive (`total_loss += loss`).
ADD_OPS = frozenset({"__add__", "__radd__", "__iadd__", "add", "add_", "__sub__", "__rsub__", "__isub__", "sub",
                     "sub_"})

_INPLACE_DUNDERS = frozenset({
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__"})
RANDOM_OPS = frozenset({
    "rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal",
    "bernoulli", "multinomial", "poisson", "uniform_", "normal_", "random_", "bernoulli_", "exponential_",
    "cauchy_", "log_normal_", "geometric_", "dropout", "dropout1d", "dropout2d", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
    "xavier_normal_", "trunc_normal_", "orthogonal_", "sparse_"})
# Operations that hand back values outside autograd: where a computation graph can break.
BREAK_OPS = frozenset({"detach", "detach_", "item", "__float__", "__int__", "tolist", "numpy", "tensor",
                       "new_tensor", "data"})
# Outputs that are uninitialised memory (never a NaN finding) or views/copies of existing values.
_NO_VALUE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "set_", "resize_",
    "resize_as_", "view", "reshape", "__getitem__", "t", "transpose", "permute", "flatten", "unflatten",
    "squeeze", "unsqueeze", "contiguous", "expand", "expand_as", "view_as", "reshape_as", "narrow",
    "select", "split", "chunk", "unbind", "clone", "to", "cpu", "cuda", "float", "double", "half",
    "bfloat16", "type", "type_as", "detach", "detach_", "requires_grad_", "retain_grad", "size", "dim",
    "numel", "stride", "storage_offset", "is_contiguous", "is_floating_point", "is_complex", "data_ptr",
    "untyped_storage", "__len__", "__repr__", "__format__", "__hash__", "__eq__", "__bool__", "__iter__",
    "item", "tolist", "numpy", "_record_function_enter_new", "_set_grad_enabled", "backward",
    "register_hook", "zero_", "fill_", "copy_", "masked_fill", "masked_fill_", "where"})


# torch.nn.functional activations with an `inplace` argument (nn.ReLU(inplace=True) calls F.relu).
_FUNCTIONAL_INPLACE = frozenset({
    "relu", "relu6", "elu", "selu", "celu", "leaky_relu", "hardtanh", "threshold", "rrelu", "silu",
    "hardswish", "hardsigmoid", "mish", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
    "feature_alpha_dropout"})


def category(name: str) -> int:
    cat = 0
    if name in ("__get__", "__set__", "__delete__"):
        return ATTR | NO_VALUES
    if (name.endswith("_") and not name.startswith("_")) or name in _INPLACE_DUNDERS:
        cat |= INPLACE
    if name in RANDOM_OPS:
        cat |= RANDOM
    if name in BREAK_OPS:
        cat |= BREAK
    if name in _NO_VALUE_OPS or name.startswith(("is_", "_foreach", "__")):
        cat |= NO_VALUES
    if name == "backward":
        cat |= BACKWARD
    if name in _FUNCTIONAL_INPLACE:
        cat |= MAYBE_INPLACE
    if name in ADD_OPS:
        cat |= ADD
    return cat


def inplace_flag(func: Any, args: tuple, kwargs: dict, positions: dict[Any, int | None]) -> bool:
    """Whether a functional call like F.relu(x, inplace=True) / F.dropout(x, p, training, True) is in place."""
    if "inplace" in kwargs:
        return bool(kwargs["inplace"])
    try:
        index = positions[func]
    except KeyError:
        index = None
        try:
            params = list(inspect.signature(func).parameters)
            index = params.index("inplace") if "inplace" in params else None
        except (TypeError, ValueError):
            pass
        positions[func] = index
    return index is not None and len(args) > index and bool(args[index])
