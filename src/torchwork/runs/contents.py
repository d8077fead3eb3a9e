"""What a checkpoint must hold before anything is restored from it: every field's type, shape and range.

A checksum proves that a file is the one written, not that what was written is a checkpoint this torchwork
can resume: a file edited and re-hashed, or written by other code, reaches the loader intact. Each field
(counters, history, every RNG stream, the optimizer's layout, the weights' values) is checked here, so a bad
one is a :class:`~torchwork.errors.CheckpointError` naming it, before the model, the optimizer or a random
generator is touched. Weights holding NaN or inf are refused: resuming them would train on nothing.

Example:
    >>> from torchwork.runs.contents import check_contents
    >>> optimizer = {"state": {}, "param_groups": []}
    >>> check_contents({"model": {}, "optimizer": optimizer, "counters": [8]}, "c.pt")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.CheckpointError: checkpoint c.pt cannot be resumed: 'counters' is [8], not a mapping. ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from torchwork.errors import CheckpointError
from torchwork.finite import is_finite_number

COUNTERS = ("global_step", "skipped_steps", "epoch", "batch_in_epoch")
MT19937_WORDS = 624
# Optimizer state tensors that hold one value per parameter element (torch.optim's names): their shape must be
# the parameter's, or the first step after the resume fails deep inside the optimizer.
ELEMENTWISE_STATE = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "sum", "square_avg",
                     "acc_delta", "ax", "grad_avg", "prev", "exp_inf", "step_size"}


class _Bad(Exception):
    """A field that is not what a checkpoint holds (turned into one CheckpointError)."""


def check_contents(state: Any, path: Any) -> None:
    """Raise :class:`CheckpointError` unless ``state`` (a loaded checkpoint) holds what resume needs."""
    from torchwork.runs.checkpoint import non_finite_tensors

    try:
        _check(state)
    except _Bad as bad:
        raise CheckpointError(f"checkpoint {path} cannot be resumed: {bad} It passed its checksum, so it was "
                              "written like this (by other code, or edited and re-hashed): resume from another "
                              "checkpoint or start a new run.") from None
    bad_weights = non_finite_tensors(state["model"])
    if bad_weights:
        raise CheckpointError(f"checkpoint {path} cannot be resumed: its weights {bad_weights[:5]} hold NaN/inf "
                              "(the run had diverged when it was written). Resume from an earlier checkpoint, "
                              "with a lower learning rate or clip_grad_norm.")


def _check(state: Any) -> None:
    _mapping(state, "the checkpoint")
    model = _mapping(state.get("model"), "'model'")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in model.items()):
        raise _Bad("'model' is not a state dict of named tensors.")
    _optimizer(state.get("optimizer"))
    for name in ("scheduler", "scaler"):
        if state.get(name) is not None:
            _mapping(state[name], f"{name!r}")
    counters = _mapping(state.get("counters"), "'counters'")
    for name in COUNTERS:
        _count(counters.get(name), f"counters[{name!r}]")
    history = state.get("history", [])
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise _Bad("'history' is not a list of per-epoch records.")
    if state.get("callbacks") is not None and not isinstance(state["callbacks"], list):
        raise _Bad("'callbacks' is not a list.")
    world = state.get("world_size", 1)
    _count(world, "'world_size'")
    threads = state.get("threads")
    if threads is not None and not (_integer(threads) and threads >= 1):
        raise _Bad(f"'threads' is {_shown(threads)}, not a thread count (an integer >= 1).")
    stopped = state.get("stopped")
    if stopped is not None and not (isinstance(stopped, str) and len(stopped) <= 1000):
        raise _Bad(f"'stopped' is {_shown(stopped)}, not why training stopped (a text of at most 1000 characters).")
    best = state.get("best_value")
    if best is not None and not is_finite_number(best):
        raise _Bad(f"'best_value' is {_shown(best)}, not a finite number.")
    per_rank = state.get("per_rank")
    if per_rank is None:
        _rank_state(state, "the checkpoint")
    elif not isinstance(per_rank, list) or not per_rank:
        raise _Bad("'per_rank' is not a list of each rank's state.")
    else:
        for index, own in enumerate(per_rank):
            _rank_state(_mapping(own, f"per_rank[{index}]"), f"per_rank[{index}]")


def _optimizer(saved: Any) -> None:
    saved = _mapping(saved, "'optimizer'")
    _mapping(saved.get("state"), "optimizer['state']")
    groups = saved.get("param_groups")
    if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("params"), list) and all(_integer(p) for p in g["params"])
            for g in groups):
        raise _Bad("optimizer['param_groups'] is not a list of groups, each with a list of parameter ids.")


def _rank_state(own: Mapping[str, Any], where: str) -> None:
    _rng(own.get("rng"), f"{where}['rng']")
    start = own.get("epoch_start_rng")
    if start is not None:
        start = _mapping(start, f"{where}['epoch_start_rng']")
        _torch_rng(start.get("torch"), f"{where}['epoch_start_rng']['torch']")
        if start.get("loader") is not None:
            _torch_rng(start["loader"], f"{where}['epoch_start_rng']['loader']")
    if own.get("loader_rng") is not None:
        _torch_rng(own["loader_rng"], f"{where}['loader_rng']")
    totals = own.get("epoch_totals")
    if totals is not None and not (isinstance(totals, dict) and all(
            _total(v) or (isinstance(v, dict) and all(_total(t) for t in v.values())) for v in totals.values())):
        raise _Bad(f"{where}['epoch_totals'] is not a mapping of running totals.")


def _rng(rng: Any, where: str) -> None:
    rng = _mapping(rng, where)
    python = rng.get("python")
    if not (isinstance(python, (tuple, list)) and len(python) == 3 and _integer(python[0])
            and isinstance(python[1], (tuple, list)) and len(python[1]) == MT19937_WORDS + 1
            and all(_integer(w) and 0 <= w < 2 ** 32 for w in python[1][:-1]) and _integer(python[1][-1])
            and 0 <= python[1][-1] <= MT19937_WORDS and (python[2] is None or _number(python[2]))):
        raise _Bad(f"{where}['python'] is not a Python random generator state.")
    numpy = _mapping(rng.get("numpy"), f"{where}['numpy']")
    key = numpy.get("key")
    if not (numpy.get("bit_generator") == "MT19937" and isinstance(key, torch.Tensor)
            and tuple(key.shape) == (MT19937_WORDS,) and not key.is_floating_point()
            and _integer(numpy.get("pos")) and 0 <= numpy["pos"] <= MT19937_WORDS
            and numpy.get("has_gauss") in (0, 1) and _number(numpy.get("gauss"))):
        raise _Bad(f"{where}['numpy'] is not a NumPy MT19937 generator state.")
    _torch_rng(rng.get("torch"), f"{where}['torch']")
    cuda = rng.get("cuda") or []
    if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
        raise _Bad(f"{where}['cuda'] is not a list of CUDA generator states.")


def _torch_rng(value: Any, where: str) -> None:
    expected = torch.get_rng_state().numel()
    if not (isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 1
            and value.numel() == expected):
        raise _Bad(f"{where} is {_shown(value)}, not a torch generator state ({expected} bytes).")


def check_optimizer_fits(optimizer: torch.optim.Optimizer, saved: Mapping[str, Any], path: Any = "") -> None:
    """Raise :class:`CheckpointError` unless the saved optimizer state has this optimizer's groups and
    parameter counts, and its per-element state tensors have each parameter's shape."""
    where = f"checkpoint {path}: " if path else "the checkpoint's "
    groups = optimizer.param_groups
    saved_groups = saved["param_groups"]
    if len(saved_groups) != len(groups) or any(len(a["params"]) != len(b["params"])
                                               for a, b in zip(saved_groups, groups)):
        raise CheckpointError(
            f"{where}optimizer has {len(saved_groups)} parameter group(s) of "
            f"{[len(g['params']) for g in saved_groups][:8]} parameters; this one has {len(groups)} of "
            f"{[len(g['params']) for g in groups][:8]}. Resume with the same model and optimizer setup.")
    shapes = {saved_id: tuple(param.shape) for saved_group, group in zip(saved_groups, groups)
              for saved_id, param in zip(saved_group["params"], group["params"])}
    for key, entry in saved["state"].items():
        if key not in shapes or not isinstance(entry, dict):
            raise CheckpointError(f"{where}optimizer state names parameter {_shown(key)}, which no group holds.")
        for name, value in entry.items():
            if name in ELEMENTWISE_STATE and isinstance(value, torch.Tensor) and tuple(value.shape) != shapes[key]:
                raise CheckpointError(f"{where}optimizer state {name!r} of parameter {key} has shape "
                                      f"{tuple(value.shape)}, the parameter {shapes[key]}. Resume with the same model.")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where} is {_shown(value)}, not a mapping.")
    return value


def _count(value: Any, where: str) -> None:
    if not (_integer(value) and value >= 0):
        raise _Bad(f"{where} is {_shown(value)}, not a count (an integer >= 0).")


def _total(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or _number(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 40 else f"a {type(value).__name__}"
