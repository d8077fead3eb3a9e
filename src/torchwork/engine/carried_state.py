"""State a ``step_fn`` carries from batch to batch that no checkpoint holds: named once, at the first
checkpoint, so that a resume that cannot be exact says so.

A ``step_fn`` may keep state across batches: a truncated-BPTT hidden state in a closure variable
(``nonlocal hidden``) or an attribute of a callable object, a counter. A checkpoint saves the weights,
optimizer, RNG streams and data position, and a ``step_fn`` object's ``state_dict()`` when it has one; any
other carried state restarts from its first value on resume. What counts as carried: a closure variable or
an attribute that holds a tensor or a number at the first checkpoint and changed since ``fit`` started (a
hidden state that was None at the start included; a constant such as a clipping value does not change, and
is not state). A module (the model, a loss) keeps its own state.

Example:
    >>> import torch
    >>> def make_step():
    ...     hidden = torch.zeros(2)
    ...     def step(model, batch):
    ...         nonlocal hidden
    ...         hidden = hidden + 1
    ...         return hidden.sum()
    ...     return step
    >>> step = make_step()
    >>> before = carried_values(step)
    >>> _ = step(None, None)
    >>> changed_state(step, before)
    ['hidden']
"""

from __future__ import annotations

import warnings
from typing import Any

import torch


def _candidates(step_fn: Any) -> dict[str, Any]:
    """A ``step_fn``'s closure variables, or a callable object's attributes, that may carry state."""
    found: dict[str, Any] = {}
    code, closure = getattr(step_fn, "__code__", None), getattr(step_fn, "__closure__", None)
    if code is not None and closure:
        for name, cell in zip(code.co_freevars, closure):
            try:
                found[name] = cell.cell_contents
            except ValueError:  # a cell not filled yet
                continue
    owner = getattr(step_fn, "__self__", None)  # a bound method: its object's attributes
    if owner is not None and hasattr(owner, "__dict__"):
        found.update(vars(owner))
    elif code is None and hasattr(step_fn, "__dict__"):  # a callable object
        found.update(vars(step_fn))
    return {name: value for name, value in found.items()
            if not isinstance(value, torch.nn.Module) and not callable(value)}


def _stateful_kind(value: Any) -> bool:
    if isinstance(value, torch.nn.Module):
        return False
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fingerprint(value: Any) -> Any:
    """What changes when the value does: a tensor's identity and in-place version, a number itself."""
    if isinstance(value, torch.Tensor):
        return (id(value), value._version)
    if isinstance(value, (tuple, list)):
        return tuple(_fingerprint(v) for v in value)
    return value if value is None or isinstance(value, (int, float, str)) else id(value)


def carried_values(step_fn: Any) -> dict[str, Any]:
    """The fingerprints of what ``step_fn`` might carry, taken when ``fit`` starts."""
    if step_fn is None or hasattr(step_fn, "state_dict"):
        return {}
    return {name: _fingerprint(value) for name, value in _candidates(step_fn).items()}


def changed_state(step_fn: Any, before: dict[str, Any]) -> list[str]:
    """The names among ``before`` whose values changed since: state no checkpoint holds."""
    if not before:
        return []
    now = _candidates(step_fn)
    return sorted(name for name, old in before.items()
                  if name in now and _stateful_kind(now[name]) and _fingerprint(now[name]) != old)


def warn_carried_state(step_fn: Any, before: dict[str, Any]) -> None:
    """Warn, naming the state ``step_fn`` carried since ``before`` (:func:`carried_values`) that no checkpoint
    holds; nothing when there is none."""
    names = changed_state(step_fn, before)
    if names:
        warnings.warn(f"step_fn carries {', '.join(names)} from batch to batch, and the checkpoints do not hold "
                      "it: a resume restarts it from its first value and will not be exact. Give the step_fn "
                      "object state_dict() and load_state_dict() (a class with __call__), and the checkpoints "
                      "save and restore it.", stacklevel=2)
