"""state-dict-mismatch: load_state_dict key or shape mismatches, diagnosed; and strict=False loading nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from torchwork.doctor.checks import Check

_PREFIXES = (("module.", "a DataParallel/DistributedDataParallel wrapper"), ("_orig_mod.", "torch.compile"))
_WRAPPER_KEYS = ("model", "state_dict", "model_state_dict", "net", "module", "weights")


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def diagnose_state_dict(model_state: Mapping[str, Any], given: Mapping[str, Any]) -> tuple[str, str]:
    """(what is wrong, how to fix it) for loading ``given`` into a model whose state dict is ``model_state``.

    Example:
        >>> import torch
        >>> model = {"fc.weight": torch.zeros(5, 8), "fc.bias": torch.zeros(5)}
        >>> print(diagnose_state_dict(model, {"module." + k: v for k, v in model.items()})[0])
        Every checkpoint key has the prefix 'module.' (saved from a DataParallel/DistributedDataParallel wrapper); without it the keys match the model.
    """
    mine, theirs = set(model_state), set(given)
    missing, unexpected = sorted(mine - theirs), sorted(theirs - mine)
    for prefix, origin in _PREFIXES:
        if unexpected and all(k.startswith(prefix) for k in unexpected):
            stripped = {k[len(prefix):] for k in unexpected}
            if stripped >= set(missing):
                return (f"Every checkpoint key has the prefix '{prefix}' (saved from {origin}); without it the "
                        "keys match the model.",
                        "Strip it before loading: torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"
                        f"(state_dict, '{prefix}'), and save the unwrapped model next time "
                        f"({'model.module' if prefix == 'module.' else 'model._orig_mod'}.state_dict()).")
        if missing and all(k.startswith(prefix) for k in missing):
            if {k[len(prefix):] for k in missing} >= set(unexpected):
                return (f"The model's keys have the prefix '{prefix}' ({origin}) but the checkpoint's do not.",
                        f"Load into the inner model ({'model.module' if prefix == 'module.' else 'model._orig_mod'}"
                        ".load_state_dict(...)), or load before wrapping.")
    wrapped = [k for k in _WRAPPER_KEYS if k in given and isinstance(given[k], Mapping)]
    if wrapped and not (mine & theirs):
        return (f"The file holds a checkpoint dictionary (keys {sorted(given)[:5]}), not a state dict.",
                f"Load the weights inside it: model.load_state_dict(checkpoint[{wrapped[0]!r}]).")
    shapes = [(k, _shape(given[k]), _shape(model_state[k])) for k in sorted(mine & theirs)
              if _shape(given[k]) != _shape(model_state[k])]
    parts, fixes = [], []
    if shapes:
        key, saved, current = shapes[0]
        listed = "; ".join(f"{k}: checkpoint {list(a or ())} vs model {list(b or ())}" for k, a, b in shapes[:3])
        head = ""
        if saved and current and len(saved) == len(current) and saved[1:] == current[1:]:
            head = f" The first dimension differs ({saved[0]} vs {current[0]}): a head of another size."
        parts.append(f"{len(shapes)} tensor(s) have another shape: {listed}.{head}")
        fixes.append("build the model with the checkpoint's sizes, or drop those keys and load with strict=False "
                     "to fine-tune a new head (then check that missing_keys lists exactly the head)")
    if missing:
        parts.append(f"{len(missing)} model key(s) are missing from the checkpoint (e.g. {missing[:3]}).")
    if unexpected:
        parts.append(f"{len(unexpected)} checkpoint key(s) are not in the model (e.g. {unexpected[:3]}).")
    if missing or unexpected:
        fixes.append("compare the two key lists: the checkpoint comes from another architecture or version")
    fix = "; ".join(fixes) or "compare the checkpoint's keys with model.state_dict().keys()"
    return " ".join(parts) or "The state dict does not match the model.", fix[0].upper() + fix[1:] + "."


class StateDictMismatch(Check):
    id = "state-dict-mismatch"
    severity = "error"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.depth = 0

    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def load_state_dict(module: torch.nn.Module, state_dict: Mapping[str, Any], *args: Any,
                                **kwargs: Any) -> Any:
                strict = kwargs.get("strict", args[0] if args else True)
                check.depth += 1
                try:
                    result = original(module, state_dict, *args, **kwargs)
                except RuntimeError as error:
                    if check.depth == 1 and "Error(s) in loading state_dict" in str(error):
                        check.session._safely(check._mismatch, module, state_dict)
                    raise
                finally:
                    check.depth -= 1
                if check.depth == 0 and not strict:
                    check.session._safely(check._partial, module, state_dict, result)
                return result
            return load_state_dict

        self.session.patch(torch.nn.Module, "load_state_dict", make)

    def _mismatch(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
        what, fix = diagnose_state_dict(module.state_dict(), state_dict)
        self.report(f"{type(module).__name__}.load_state_dict failed. {what}", fix)

    def _partial(self, module: torch.nn.Module, state_dict: Mapping[str, Any], result: Any) -> None:
        model_keys = list(module.state_dict())
        missing = list(getattr(result, "missing_keys", []))
        if model_keys and len(missing) == len(model_keys):
            what, fix = diagnose_state_dict(module.state_dict(), state_dict)
            self.report(f"load_state_dict(strict=False) loaded nothing: none of the {len(model_keys)} model keys "
                        f"was in the checkpoint, so the model keeps its random weights. {what}", fix)
