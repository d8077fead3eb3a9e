"""``load_pretrained``: load what fits, say exactly what did not, and check values, not names.

Keys are matched after the wrapper prefix is found (:mod:`torchwork.finetune.prefixes`) and the
``rename`` rules are applied; a tensor whose shape differs is never loaded. Parts named by ``new`` (a
new head) start fresh. With ``strict=True`` anything else missing, unexpected or mismatched raises
before the model is touched. Values are checked before anything is written: a tensor holding NaN or inf
is refused unless ``allow_nonfinite=True``, and a complex tensor never loads into a real one. After loading, every loaded tensor is compared with the file's, so a
``load_state_dict`` post-hook or init code that re-initialises it is caught; the checksums stay in the
report, and :meth:`LoadReport.verify` checks them again later (after your own init code, say).

Example:
    >>> import torch
    >>> from torch import nn
    >>> pretrained = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> wrapped = {f"module.{k}": v for k, v in pretrained.state_dict().items()}  # saved from DDP
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))  # a 3-class head
    >>> report = load_pretrained(model, wrapped, new=["2"])
    >>> report.loaded, report.new, report.prefix
    (['0.weight', '0.bias'], ['2.weight', '2.bias'], ('module.', ''))
    >>> torch.equal(model[0].weight, pretrained[0].weight)
    True
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from torchwork.errors import CheckpointError
from torchwork.finetune._table import format_table
from torchwork.finetune.names import matches
from torchwork.finetune.prefixes import Prefix, apply_prefix, discover_prefix, strip_given
from torchwork.finetune.sources import read_state_dict

RenameRules = Mapping[str, "str | None"] | Sequence[tuple[str, "str | None"]]

MAX_KEY_CHARS = 1024  # a state dict's keys are module paths; a longer one means a damaged or hostile file
MAX_SUGGESTIONS = 50  # likely counterparts named for at most this many missing keys


@dataclasses.dataclass
class LoadReport:
    """What :func:`load_pretrained` did. Key lists name the model's keys (``unexpected``: the file's, after
    the prefix and renames)."""

    source: str
    loaded: list[str]
    missing: list[str]
    unexpected: list[str]
    mismatched: list[str]
    new: list[str]
    prefix: Prefix = ("", "")
    renames: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (file key, model key)
    dropped: list[str] = dataclasses.field(default_factory=list)  # file keys a rename rule dropped
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = dataclasses.field(default_factory=dict)
    suggestions: dict[str, str] = dataclasses.field(default_factory=dict)  # missing key -> likely file key
    notes: list[str] = dataclasses.field(default_factory=list)  # deliberate changes after the load
    applied: bool = False  # False when strict refused: nothing was loaded
    checksums: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    model_keys: list[str] = dataclasses.field(default_factory=list, repr=False)

    @property
    def problems(self) -> int:
        """Missing + unexpected + mismatched keys (the ``new`` ones are not problems)."""
        return len(self.missing) + len(self.unexpected) + len(self.mismatched)

    def verify(self, model: Any) -> None:
        """Raise :class:`CheckpointError` if a loaded tensor no longer holds the file's values."""
        state = model.state_dict()
        changed = [k for k, digest in self.checksums.items() if k in state and _digest(state[k]) != digest]
        if changed:
            raise CheckpointError(_undone_message(changed, len(self.checksums)))

    def table(self) -> str:
        """One row per top-level module (counts), then the names of every key that did not load."""
        modules: dict[str, dict[str, int]] = {}
        columns = ("loaded", "new", "missing", "unexpected", "mismatched")
        every = [k for column in columns for k in getattr(self, column)]
        depth = next((d for d in (1, 2) if len({_module_of(k, d) for k in every}) >= 3), 3)
        for column in columns:
            for key in getattr(self, column):
                row = modules.setdefault(_module_of(key, depth), dict.fromkeys(columns, 0))
                row[column] += 1
        order = {_module_of(k, depth): i for i, k in reversed(list(enumerate(self.model_keys)))}
        names = sorted(modules, key=lambda m: (order.get(m, len(order)), m))
        lines = [self.summary(), format_table(["module", *columns], [[m, *modules[m].values()] for m in names])]
        for column in ("new", "missing", "unexpected", "mismatched"):
            keys = getattr(self, column)
            if not keys:
                continue
            shown = [f"{k} {self.shapes[k][0]} in the file, {self.shapes[k][1]} in the model"
                     if column == "mismatched" else k for k in keys[:8]]
            more = f" ... and {len(keys) - 8} more" if len(keys) > 8 else ""
            lines.append(f"{column}: " + ", ".join(shown) + more)
        for key, counterpart in self.suggestions.items():
            lines.append(f"  {key}: likely {counterpart}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def summary(self) -> str:
        total = len(self.loaded) + len(self.new) + len(self.missing) + len(self.mismatched)
        how = []
        if self.prefix[0]:
            how.append(f"prefix {self.prefix[0]!r} stripped")
        if self.prefix[1]:
            how.append(f"prefix {self.prefix[1]!r} added")
        if self.renames:
            how.append(f"{len(self.renames)} key(s) renamed")
        if self.dropped:
            how.append(f"{len(self.dropped)} dropped by rename rules")
        extra = f" ({'; '.join(how)})" if how else ""
        if not self.applied:
            return (f"load_pretrained: {len(self.loaded)} of {total} model tensors would load from {self.source}"
                    f"{extra}; nothing was loaded")
        return (f"load_pretrained: {len(self.loaded)} of {total} model tensors loaded from {self.source}{extra}; "
                f"values checked")

    def __str__(self) -> str:
        return self.table()


def load_pretrained(model: Any, source: Any, *, new: str | Sequence[str] = (),
                    rename: RenameRules | None = None, strip_prefixes: str | Sequence[str] | bool | None = "auto",
                    strict: bool = True, allow_nonfinite: bool = False) -> LoadReport:
    """Load ``source``'s weights into ``model`` and return a :class:`LoadReport`.

    Args:
        model: the module to load into.
        source: a ``.safetensors`` file, a torch checkpoint (read with ``weights_only=True``; a torchwork
            checkpoint's ``"model"`` is used), a state dict, or a folder holding one (Hugging Face layout
            included).
        new: globs of model keys or module names meant to start fresh (a new head): never loaded, never
            a problem.
        rename: regex rules ``{pattern: replacement}`` (or a list of pairs) applied in order to the file's
            keys after the prefix; a ``None`` replacement drops the keys the pattern matches.
        strip_prefixes: ``"auto"`` finds the wrapper prefix by matching; a list strips those prefixes
            (repeatedly, any order); ``False`` keeps the keys as they are.
        strict: raise :class:`CheckpointError` (with the table) when anything not in ``new`` is missing,
            unexpected or of another shape; nothing is loaded then.
        allow_nonfinite: load tensors holding NaN or inf (named in the report's notes) instead of refusing
            the file.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise CheckpointError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    new_patterns = [new] if isinstance(new, str) else list(new)
    rules = _compile_rules(rename)
    state, where = read_state_dict(source)
    target = model.state_dict()
    model_keys = list(target)
    _check_key_lengths(state, model_keys, where)

    mapped, prefix, renames, dropped = _map_keys(list(state), model_keys, strip_prefixes, rules)
    loaded, missing, mismatched, fresh, unexpected = [], [], [], [], []
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    to_load: dict[str, Any] = {}
    for key in model_keys:
        file_key = mapped.get(key)
        if matches(key, new_patterns):
            fresh.append(key)
        elif file_key is None:
            missing.append(key)
        elif tuple(state[file_key].shape) != tuple(target[key].shape):
            mismatched.append(key)
            shapes[key] = (tuple(state[file_key].shape), tuple(target[key].shape))
        else:
            loaded.append(key)
            to_load[key] = state[file_key]
    model_set = set(model_keys)
    unexpected = [name for name in mapped if name not in model_set]  # in the file's order
    report = LoadReport(where, loaded, missing, unexpected, mismatched, fresh, prefix, renames, sorted(dropped),
                        shapes, _suggest(missing, unexpected, target, state, mapped),
                        model_keys=model_keys)
    if strict and report.problems:
        raise CheckpointError(
            f"load_pretrained(strict=True): {len(missing)} missing, {len(unexpected)} unexpected and "
            f"{len(mismatched)} mismatched key(s); nothing was loaded.\n{report.table()}\n"
            "Fix: name the parts meant to start fresh with new=[...] (e.g. new=['classifier']), map names "
            "with rename={pattern: replacement} (None drops a key), or pass strict=False to load what fits.")
    _check_kinds(to_load, target, where)
    nonfinite = _nonfinite(to_load)
    if nonfinite and not allow_nonfinite:
        raise CheckpointError(
            f"{where}: {len(nonfinite)} tensor(s) hold NaN or inf: {', '.join(nonfinite[:8])}"
            f"{' ...' if len(nonfinite) > 8 else ''}; nothing was loaded. The file was saved from a diverged "
            "model: load an earlier checkpoint, or pass allow_nonfinite=True to load it as it is.")
    if nonfinite:
        report.notes.append(f"loaded {len(nonfinite)} tensor(s) holding NaN or inf (allow_nonfinite=True): "
                            + ", ".join(nonfinite[:8]) + (" ..." if len(nonfinite) > 8 else ""))
    if to_load:
        model.load_state_dict(to_load, strict=False)
    after = model.state_dict()
    changed = [k for k, v in to_load.items() if not _same_values(after[k], v.to(after[k].dtype).to(after[k].device))]
    if changed:
        raise CheckpointError(_undone_message(changed, len(to_load)))
    report.checksums = {k: _digest(after[k]) for k in to_load}
    report.applied = True
    return report


def _check_key_lengths(state: Mapping[Any, Any], model_keys: list[str], where: str) -> None:
    """Refuse keys that are not strings or absurdly long before any work that grows with key length."""
    limit = max(MAX_KEY_CHARS, 2 * max((len(k) for k in model_keys), default=0))
    for key in state:
        if not isinstance(key, str):
            raise CheckpointError(f"{where}: the key {key!r} is a {type(key).__name__}, not a string: "
                                  "a state dict's keys are parameter names.")
        if len(key) > limit:
            raise CheckpointError(
                f"{where}: a key of {len(key)} characters ({key[:40]!r}...); the longest a model key has is "
                f"{max((len(k) for k in model_keys), default=0)} and keys over {limit} are refused. The file "
                "is damaged or not a state dict: re-save it with torch.save(model.state_dict()).")


def _check_kinds(to_load: Mapping[str, Any], target: Mapping[str, Any], where: str) -> None:
    """A complex tensor copied into a real one keeps only its real part: refuse it, naming the tensors."""
    odd = [f"{k}: {str(v.dtype).removeprefix('torch.')} in the file, "
           f"{str(target[k].dtype).removeprefix('torch.')} in the model"
           for k, v in to_load.items() if v.is_complex() and not target[k].is_complex()]
    if odd:
        raise CheckpointError(f"{where}: {len(odd)} complex tensor(s) for real ones ({'; '.join(odd[:8])}); "
                              "loading would keep only the real part, so nothing was loaded. Save real weights.")


def _nonfinite(to_load: Mapping[str, Any]) -> list[str]:
    """``"key (n NaN, m inf of total)"`` for every floating tensor holding NaN or inf."""
    import torch

    found = []
    for key, value in to_load.items():
        if not (value.is_floating_point() or value.is_complex()) or bool(torch.isfinite(value).all()):
            continue
        nan = int(torch.isnan(value).sum())
        inf = int(torch.isinf(value).sum())
        counts = ", ".join(part for part in (f"{nan} NaN" if nan else "", f"{inf} inf" if inf else "") if part)
        found.append(f"{key} ({counts} of {value.numel()})")
    return found


def _same_values(a: Any, b: Any) -> bool:
    """Equal, NaN in the same places counting as equal (a file loaded with ``allow_nonfinite``)."""
    import torch

    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    return torch.equal(nan_a, nan_b) and torch.equal(a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0))


def _module_of(key: str, depth: int) -> str:
    """The module holding ``key``, at most ``depth`` names deep (``"(top)"`` for the model's own tensors)."""
    parts = key.split(".")[:-1]
    return ".".join(parts[:depth]) or "(top)"


def _compile_rules(rename: RenameRules | None) -> list[tuple[re.Pattern[str], str | None]]:
    if rename is None:
        return []
    pairs = list(rename.items()) if isinstance(rename, Mapping) else list(rename)
    rules = []
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise CheckpointError(f"rename rule {pair!r}: give {{pattern: replacement}} or (pattern, replacement).")
        pattern, replacement = pair
        try:
            rules.append((re.compile(pattern), replacement))
        except re.error as error:
            raise CheckpointError(f"rename pattern {pattern!r} is not a valid regex: {error}.") from None
    return rules


def _mapped_name(file_key: str, prefix: Prefix, rules: list, strip_prefixes: Any) -> str:
    if isinstance(strip_prefixes, (list, tuple)):
        key = strip_given(file_key, strip_prefixes)[0]
    else:
        key = apply_prefix(file_key, prefix)
    for pattern, replacement in rules:
        if replacement is not None:
            key = pattern.sub(replacement, key)
    return key


def _map_keys(file_keys: list[str], model_keys: list[str], strip_prefixes: Any,
              rules: list) -> tuple[dict[str, str], Prefix, list[tuple[str, str]], set[str]]:
    """``({model key: file key}, prefix, renames, dropped file keys)``."""
    dropped = {k for k in file_keys for p, r in rules if r is None and p.search(k)}
    kept = [k for k in file_keys if k not in dropped]
    prefix: Prefix = ("", "")
    if strip_prefixes == "auto":
        # The prefix is stripped before the renames; rules may also have been written for the bare names.
        model_set = set(model_keys)
        renamed = [_mapped_name(k, prefix, rules, None) for k in kept]
        candidates = {prefix, discover_prefix(kept, model_keys), discover_prefix(renamed, model_keys)}
        prefix = max(sorted(candidates), key=lambda c: (
            sum(_mapped_name(k, c, rules, None) in model_set for k in kept), -len(c[0] + c[1])))
    elif strip_prefixes not in (False, None) and not isinstance(strip_prefixes, (list, tuple)):
        raise CheckpointError(f"strip_prefixes={strip_prefixes!r}: use 'auto', a list of prefixes, or False.")
    mapping: dict[str, str] = {}
    renames: list[tuple[str, str]] = []
    for file_key in kept:
        before = _mapped_name(file_key, prefix, [], strip_prefixes)
        key = _mapped_name(file_key, prefix, rules, strip_prefixes)
        if key != before:
            renames.append((file_key, key))
        if key in mapping:
            raise CheckpointError(f"the file's keys {mapping[key]!r} and {file_key!r} both map to {key!r}: "
                                  "make the rename rules more specific.")
        mapping[key] = file_key
    if isinstance(strip_prefixes, (list, tuple)):
        stripped = {strip_given(k, strip_prefixes)[1] for k in kept} - {""}
        prefix = ("|".join(sorted(stripped)), "")
    return mapping, prefix, renames, dropped


def _suggest(missing: list[str], unexpected: list[str], target: Mapping[str, Any], state: Mapping[str, Any],
             mapped: Mapping[str, str]) -> dict[str, str]:
    """For the first :data:`MAX_SUGGESTIONS` missing keys, the unexpected file key of the same shape nearest
    to the same position. Unexpected keys are indexed by shape and file position, so a file of a million keys
    costs a sort, not a comparison of every pair."""
    if not missing or not unexpected:
        return {}
    file_position = {k: i for i, k in enumerate(state)}
    by_shape: dict[tuple[int, ...], list[tuple[float, str]]] = {}
    for name in unexpected:
        by_shape.setdefault(tuple(state[mapped[name]].shape), []).append(
            (file_position[mapped[name]] / max(len(state), 1), name))
    for group in by_shape.values():
        group.sort()
    model_position = {k: i / max(len(target), 1) for i, k in enumerate(target)}
    used: set[str] = set()
    suggestions: dict[str, str] = {}
    for key in missing:
        if len(suggestions) >= MAX_SUGGESTIONS:
            break
        shape = tuple(target[key].shape)
        best = _nearest_free(by_shape.get(shape, []), model_position[key], used)
        if best is not None:
            used.add(best)
            suggestions[key] = f"{best!r} (same shape {shape}, same position){_rule_hint(best, key)}"
    return suggestions


def _nearest_free(group: list[tuple[float, str]], position: float, used: set[str]) -> str | None:
    """The name in ``group`` (sorted by position) nearest to ``position`` that is not ``used`` (earlier on a tie)."""
    right = bisect.bisect_left(group, (position, ""))
    left = right - 1
    while left >= 0 and group[left][1] in used:
        left -= 1
    while right < len(group) and group[right][1] in used:
        right += 1
    choices = [group[i] for i in (left, right) if 0 <= i < len(group)]
    if not choices:
        return None
    return min(choices, key=lambda item: (abs(item[0] - position), item[0]))[1]


def _rule_hint(file_key: str, model_key: str) -> str:
    """``rename={'^fc\\.': 'head.'}`` from the differing heads of two names with a common tail."""
    a, b = file_key.split("."), model_key.split(".")
    tail = 0
    while tail < min(len(a), len(b)) - 1 and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    head_a, head_b = ".".join(a[: len(a) - tail]), ".".join(b[: len(b) - tail])
    if not head_a or not head_b:
        return ""
    rule = {"^" + re.escape(head_a + "."): head_b + "."} if tail else {"^" + re.escape(file_key) + "$": model_key}
    return f": rename={rule!r}"


def _digest(tensor: Any) -> str:
    """A checksum of a tensor's bytes (any dtype) and shape."""
    import torch

    data = tensor.detach().cpu().contiguous().reshape(-1)
    raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
    return hashlib.blake2b(raw, digest_size=16).hexdigest() + str(tuple(tensor.shape))


def _undone_message(changed: list[str], total: int) -> str:
    return (f"{len(changed)} of {total} loaded tensor(s) no longer hold the file's values (e.g. {changed[:4]}): "
            "something re-initialised them after the load — a load_state_dict post-hook, an init function "
            "(model.apply(init_weights), reset_parameters()) or a weight tie. Run initialisation before "
            "load_pretrained, or restrict it to the new parts.")
