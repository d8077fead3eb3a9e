"""state-dict-mismatch: a load that fails, or one that loads nothing, judged by its effect on the model.

Three ways a checkpoint fails to reach the model, each reported at the ``load_state_dict`` line:

* the load raises (missing/unexpected keys, other shapes): the keys are matched against the model's to
  name the wrapper prefixes a loader would have stripped (``module.``, ``_orig_mod.``, ``model.``, nested,
  found by matching, not from a fixed list), a checkpoint dictionary around the weights, or a new head;
* ``strict=False`` and none of the model's keys is in the dict, when the dict was read from a checkpoint
  file, wraps the weights in a checkpoint dictionary, or holds the model's tensors under another prefix (an
  unrelated state dict built in the process, offered to take what fits, is left alone);
* the load succeeds but changed none of the model's values because every tensor passed in is the model's
  own: the common idiom ``model_dict.update({k: v for k, v in ckpt.items() if k in model_dict})`` with a
  checkpoint whose keys carry a prefix keeps nothing. The check compares a fingerprint of each tensor
  before and after the load, and matches the checkpoints read with ``torch.load`` / safetensors to the
  model's keys to name the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.findings import format_where
from torchwork.prefixes import describe_prefix, match_prefixes

_WRAPPER_KEYS = ("model", "state_dict", "model_state_dict", "net", "module", "weights")


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _strip_hint(ckpt_prefix: str, model_prefix: str) -> str:
    if ckpt_prefix and not model_prefix:
        return ("{k.removeprefix(" + repr(ckpt_prefix) + "): v for k, v in checkpoint.items()} (or torch.nn.modules.utils."
                f"consume_prefix_in_state_dict_if_present(checkpoint, {ckpt_prefix!r}))")
    return "{" + f"{model_prefix!r} + k.removeprefix({ckpt_prefix!r}): v for k, v in checkpoint.items()" + "}"


def _prefix_renaming(missing: list[str], unexpected: list[str]) -> tuple[str, str, int] | None:
    """(checkpoint prefix, model prefix, keys matched) when one renaming explains most of the mismatched keys."""
    if not (missing and unexpected):
        return None
    ckpt_prefix, model_prefix, count = match_prefixes(missing, unexpected)
    return (ckpt_prefix, model_prefix, count) if count and count >= 0.8 * min(len(missing), len(unexpected)) else None


def _wrapper_keys(given: Mapping[str, Any]) -> list[str]:
    """The keys of ``given`` that hold a state dict inside a checkpoint dictionary ('model', 'state_dict', ...)."""
    return [k for k in _WRAPPER_KEYS if k in given and isinstance(given[k], Mapping)]


def _renamed_copy(model_state: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    """Whether ``given`` holds the model's tensors under another prefix: one renaming matches most keys, and the
    tensors it pairs have the model's shapes (two layer names that share only "weight" and "bias" do not count)."""
    mine, theirs = set(model_state), set(given)
    renaming = _prefix_renaming(sorted(mine - theirs), sorted(theirs - mine))
    if renaming is None:
        return False
    ckpt_prefix, model_prefix, _ = renaming
    paired = [(given.get(ckpt_prefix + key.removeprefix(model_prefix)), model_state[key])
              for key in mine - theirs if key.startswith(model_prefix)]
    agreeing = sum(1 for saved, own in paired if saved is not None and _shape(saved) == _shape(own))
    return agreeing >= 0.8 * min(len(mine - theirs), len(theirs - mine))


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
    renaming = _prefix_renaming(missing, unexpected)
    if renaming is not None:
        ckpt_prefix, model_prefix, count = renaming
        if ckpt_prefix and not model_prefix:
            inner = ".".join(["model"] + [p for p in ckpt_prefix.split(".") if p])
            return (f"Every checkpoint key has the prefix '{ckpt_prefix}' (saved from {describe_prefix(ckpt_prefix)}); "
                    "without it the keys match the model.",
                    f"Strip it before loading: {_strip_hint(ckpt_prefix, model_prefix)}, and save the unwrapped "
                    f"model next time ({inner}.state_dict()).")
        if model_prefix and not ckpt_prefix:
            inner = ".".join(["model"] + [p for p in model_prefix.split(".") if p])
            return (f"The model's keys have the prefix '{model_prefix}' ({describe_prefix(model_prefix)}) but the "
                    "checkpoint's do not.",
                    f"Load into the inner model ({inner}.load_state_dict(...)), or load before wrapping.")
        return (f"The checkpoint's keys start with '{ckpt_prefix}' where the model's start with '{model_prefix}'; "
                f"with that renaming {count} keys match.",
                f"Rename before loading: {_strip_hint(ckpt_prefix, model_prefix)}.")
    wrapped = _wrapper_keys(given)
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


def _fingerprint(tensor: torch.Tensor) -> tuple[float, float] | None:
    """Two reductions that differ, in practice, whenever the values do (a load copies whole tensors)."""
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return None
    flat = tensor.detach().reshape(-1).double()
    weights = torch.arange(flat.numel(), dtype=torch.int64) % 7 + 1
    return float(flat.sum()), float((flat * weights).sum())


def _storage(tensor: Any) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr() if isinstance(tensor, torch.Tensor) else None
    except Exception:  # sparse or storage-less tensors
        return None


def _tensor_mapping(value: Any) -> Mapping[str, Any] | None:
    """The state dict inside something torch.load returned (itself, or checkpoint['state_dict'] etc.)."""
    if not isinstance(value, Mapping) or not value:
        return None
    if any(isinstance(v, torch.Tensor) for v in list(value.values())[:8]):
        return value
    for key in _WRAPPER_KEYS:
        inner = value.get(key)
        if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in list(inner.values())[:8]):
            return inner
    return None


class StateDictMismatch(Check, id="state-dict-mismatch", severity="error"):
    def setup(self) -> None:
        self.depth = 0
        self.read: list[tuple[tuple[str, int] | None, list[str]]] = []  # checkpoints read: (where, keys)
        self.disk_keys: list[frozenset[str]] = []  # the keys of the last checkpoints read, kept across loads

    def install(self) -> None:
        check = self

        def make(original: Any) -> Any:
            def load_state_dict(module: torch.nn.Module, state_dict: Mapping[str, Any], *args: Any,
                                **kwargs: Any) -> Any:
                strict = kwargs.get("strict", args[0] if args else True)
                check.depth += 1
                before = check.session.safely(check._before, module, state_dict) if check.depth == 1 else None
                try:
                    result = original(module, state_dict, *args, **kwargs)
                except RuntimeError as error:
                    if check.depth == 1:
                        check.read = []
                        if "Error(s) in loading state_dict" in str(error):
                            check.session.safely(check._mismatch, module, state_dict)
                    raise
                finally:
                    check.depth -= 1
                if check.depth == 0:
                    if before is None:
                        check.read = []
                    if not strict:
                        check.session.safely(check._partial, module, state_dict)
                    if before is not None:
                        check.session.safely(check._after, module, before)
                return result
            return load_state_dict

        def reader(original: Any) -> Any:
            def load(*args: Any, **kwargs: Any) -> Any:
                value = original(*args, **kwargs)
                check.session.safely(check._remember, value)
                return value
            return load

        self.session.patch(torch.nn.Module, "load_state_dict", make)
        self.session.patch(torch, "load", reader)
        try:
            import safetensors.torch as safetensors_torch
        except ImportError:
            return
        self.session.patch(safetensors_torch, "load_file", reader)

    # ----------------------------------------------------------------- what was read
    def _remember(self, value: Any) -> None:
        mapping = _tensor_mapping(value)
        if mapping is not None:
            self.read = (self.read + [(self.session.where(), [str(k) for k in mapping])])[-4:]
            self.disk_keys = (self.disk_keys + [frozenset(str(k) for k in mapping)])[-8:]

    # ----------------------------------------------------------------- a load judged by its effect
    def _before(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> dict[str, Any] | None:
        own = module.state_dict(keep_vars=True)
        params = {name for name, _ in module.named_parameters()}
        if not params or not isinstance(state_dict, Mapping):
            return None
        # Only the idiom matters here: every parameter passed in is the model's own tensor.
        for name in params:
            given = state_dict.get(name)
            if given is None or _storage(given) != _storage(own.get(name)):
                return None
        return {name: _fingerprint(own[name]) for name in params}

    def _after(self, module: torch.nn.Module, before: dict[str, Any]) -> None:
        read, self.read = self.read, []  # checkpoints read since the previous load
        own = module.state_dict(keep_vars=True)
        changed = [name for name, print_ in before.items() if name in own and _fingerprint(own[name]) != print_]
        if changed or not read:  # no checkpoint was read for this load: reloading its own values on purpose
            return
        where = read[-1][0]
        message = (f"{type(module).__name__}.load_state_dict changed none of the model's {len(before)} parameter "
                   f"tensors: every tensor passed in was the model's own (model.state_dict() updated with nothing "
                   f"from the checkpoint read at {format_where(where)}), so the model keeps its random "
                   "initialisation.")
        fix = ("Match the checkpoint's keys to the model's before filtering, and check how many were kept "
               "(len(pretrained_dict)); load with model.load_state_dict(checkpoint) to get an error that lists "
               "the keys.")
        source = self._matching_checkpoint(list(own), read)
        if source is not None:
            where, ckpt_prefix, model_prefix, count = source
            origin = describe_prefix(ckpt_prefix or model_prefix)
            message += (f" That checkpoint has the same keys with the prefix '{ckpt_prefix}' instead of "
                        f"'{model_prefix}' ({origin}; {count} keys match after renaming), so a filter like "
                        "`if k in model_dict` kept none of them.")
            fix = f"Rename the keys first: checkpoint = {_strip_hint(ckpt_prefix, model_prefix)}; then filter and load."
        self.report(message, fix)

    @staticmethod
    def _matching_checkpoint(model_keys: list[str], read: list[Any]) -> tuple[Any, str, str, int] | None:
        for where, keys in reversed(read):
            ckpt_prefix, model_prefix, count = match_prefixes(model_keys, keys)
            if count >= max(1, len(model_keys) // 2) and (ckpt_prefix or model_prefix):
                return where, ckpt_prefix, model_prefix, count
        return None

    # ----------------------------------------------------------------- failures and strict=False
    def _mismatch(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
        what, fix = diagnose_state_dict(module.state_dict(), state_dict)
        self.report(f"{type(module).__name__}.load_state_dict failed. {what}", fix)

    def _partial(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
        model_state = module.state_dict()
        model_keys = list(model_state)
        # "Nothing loaded" is judged from the keys, not from result.missing_keys: BatchNorm leaves a missing
        # num_batches_tracked out of that list, so a model with BatchNorm never had every key reported missing.
        if not model_keys or not isinstance(state_dict, Mapping) or set(model_keys) & set(state_dict):
            return
        read_from_disk = any(set(state_dict) <= keys for keys in self.disk_keys)
        # An unrelated state dict built in this process (trl's value head offered its whole language model's
        # state_dict(), to pick up 'v_head.*' keys if any) is a deliberate "take what fits" that found nothing.
        if read_from_disk or _wrapper_keys(state_dict) or _renamed_copy(model_state, state_dict):
            what, fix = diagnose_state_dict(model_state, state_dict)
            self.report(f"load_state_dict(strict=False) loaded nothing: none of the {len(model_keys)} model keys "
                        f"was in the checkpoint, so the model keeps its random weights. {what}", fix)
