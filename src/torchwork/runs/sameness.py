"""Whether a run folder holds *this* training: a run resumes only itself.

Before a checkpoint is resumed, what the run's manifest recorded is compared with the training about to
continue it: the model's structure and its parameters' shapes (from the checkpoint itself), the optimizer
and its settings, the scheduler, the step settings, the config and what the manifest says of the data; and
the checkpoint must have been written by that run. :func:`differences` lists what differs, most telling
first. More epochs than recorded is not a difference, unless the schedule cannot go on past its planned
end (:func:`extension_problem`).

Example:
    >>> old = {"optimizer": {"class": "AdamW", "param_groups": [{"lr": 0.003}]}, "training": {"epochs": 15}}
    >>> new = {"optimizer": {"class": "AdamW", "param_groups": [{"lr": 0.05}]}, "training": {"epochs": 18}}
    >>> differences(old, new)
    ['optimizer.param_groups[0].lr 0.003 -> 0.05']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Schedulers planned for a fixed number of steps: stepping past the end fails (OneCycleLR) or turns back.
FIXED_LENGTH = {"OneCycleLR": "total_steps", "CosineAnnealingLR": "T_max", "PolynomialLR": "total_iters"}
# What is compared, in the order differences are named. Epochs, steps and the device may change between sessions.
_COMPARED = ("optimizer", "scheduler", "training", "config", "data")
_NOT_COMPARED = {("training", "epochs"), ("training", "max_steps"), ("training", "device")}


def as_json(value: Any) -> Any:
    """``value`` as the manifest stores it (tuples become lists, other objects their text)."""
    return json.loads(json.dumps(value, default=str))


def _walk(old: Any, new: Any, path: str, found: list[str]) -> None:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in [*old, *(k for k in new if k not in old)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                found.append(f"{where} removed")
            elif key not in old:
                found.append(f"{where} added ({_short(new[key])})")
            else:
                _walk(old[key], new[key], where, found)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            _walk(a, b, f"{path}[{index}]", found)
    elif old != new:
        found.append(f"{path} {_short(old)} -> {_short(new)}")


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _structure_difference(old: str, new: str) -> str | None:
    if old == new:
        return None
    for a, b in zip(old.splitlines(), new.splitlines()):
        if a != b:
            return f"model structure: {_module_line(a)} -> {_module_line(b)}"
    return "model structure: a different number of modules"


def _module_line(line: str) -> str:
    """One line of a module's repr, its parentheses closed (``Sequential(`` opens a block of lines: shown as
    ``Sequential(...)``, not as an unclosed parenthesis inside the message's own)."""
    text = line.strip()
    return text + "...)" if text.endswith("(") else text


def shape_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """How the checkpoint's weights differ in names and shapes from the model's state dict."""
    found = []
    missing = [k for k in current if k not in saved]
    extra = [k for k in saved if k not in current]
    if missing:
        found.append(f"parameters not in the checkpoint: {', '.join(missing[:3])}")
    if extra:
        found.append(f"parameters only in the checkpoint: {', '.join(extra[:3])}")
    for key in saved:
        if key in current and hasattr(saved[key], "shape") and tuple(saved[key].shape) != tuple(current[key].shape):
            found.append(f"parameter {key} shape {list(saved[key].shape)} -> {list(current[key].shape)}")
    return found


def differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a run's recorded manifest and the manifest of the training about to resume it
    (model structure, optimizer, scheduler, step settings, config, data), epochs and device aside."""
    found = []
    structure = _structure_difference(str(recorded.get("model", {}).get("structure", "")),
                                      str(current.get("model", {}).get("structure", "")))
    if structure and recorded.get("model"):
        found.append(structure)
    for part in _COMPARED:
        old, new = as_json(recorded.get(part)), as_json(current.get(part))
        if isinstance(old, dict) and isinstance(new, dict):
            old = {k: v for k, v in old.items() if (part, k) not in _NOT_COMPARED}
            new = {k: v for k, v in new.items() if (part, k) not in _NOT_COMPARED}
            if part == "data":  # compare what both record: an older manifest may lack a newer field
                old, new = ({k: v for k, v in d.items() if k in old and k in new} for d in (old, new))
        _walk(old, new, part, found)
    return found


def extension_problem(recorded: Mapping[str, Any], epochs: int | None) -> str | None:
    """Why the recorded run cannot train ``epochs`` epochs (more than it planned), or None (also when the
    epochs are not known: a run of ``max_steps`` on a loader without a length)."""
    planned = recorded.get("training", {}).get("epochs")
    scheduler = recorded.get("scheduler") or {}
    length_key = FIXED_LENGTH.get(scheduler.get("class", ""))
    if not isinstance(planned, int) or epochs is None or epochs <= planned or length_key is None:
        return None
    length = scheduler.get("state", {}).get(length_key)
    return (f"it was planned for {planned} epochs and its {scheduler['class']} schedule ends after "
            f"{length_key}={length} steps, so it cannot go on to {epochs} epochs. Train {planned} epochs to "
            "finish it, or start a new run for the longer schedule (resume=None, or a new run_dir)")
