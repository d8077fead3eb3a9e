"""Wrapper prefixes in state-dict keys, found by matching key lists, not from a fixed list (no torch needed).

A model wrapped by DDP/DataParallel saves ``module.*`` keys, a compiled one ``_orig_mod.*``, a training
wrapper ``model.*``/``bert.*``, and wrappers nest (``module._orig_mod.*``). Rather than trying a fixed list,
match the two key lists: the renaming ``file_prefix + k -> model_prefix + k`` that maps the most keys wins.
The loader (:func:`torchwork.finetune.load_pretrained`) and the doctor (``state-dict-mismatch``, ``explain``)
share this one matcher.

Example:
    >>> discover_prefix(["module._orig_mod.fc.weight", "module._orig_mod.fc.bias"], ["fc.weight", "fc.bias"])
    ('module._orig_mod.', '')
    >>> discover_prefix(["fc.weight"], ["backbone.fc.weight"])
    ('', 'backbone.')
    >>> apply_prefix("module.fc.weight", ("module.", ""))
    'fc.weight'
    >>> match_prefixes(["fc.weight", "fc.bias"], ["module._orig_mod.fc.weight", "module._orig_mod.fc.bias"])
    ('module._orig_mod.', '', 2)
    >>> describe_prefix("module._orig_mod.")
    'a DataParallel/DistributedDataParallel wrapper, inside it torch.compile'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

Prefix = tuple[str, str]  # (stripped from the file's keys, added to them)

_ORIGINS = {"module": "a DataParallel/DistributedDataParallel wrapper", "_orig_mod": "torch.compile",
            "model": "a wrapper holding the network as `.model` (Lightning, EMA, HF)"}


def _cuts(key: str) -> list[int]:
    return [0] + [i + 1 for i, ch in enumerate(key) if ch == "."]


def match_prefixes(model_keys: Iterable[str], checkpoint_keys: Iterable[str]) -> tuple[str, str, int]:
    """(checkpoint prefix, model prefix, keys matched) of the renaming that matches the most keys.

    Keys are matched by their tails at dot boundaries; a tail shared by many model keys ("weight") votes
    for nothing on its own. Wrappers add or remove a prefix, so a pure strip or add (one side empty) is
    preferred to a renaming between two layer names when it has at least half the evidence (a checkpoint
    key votes with its longest tail the model knows, weighted by its length; short, truncated key lists
    otherwise pair ``module.conv1.1.*`` with ``conv5.1.*``).

    Example:
        >>> match_prefixes(["model.fc.weight"], ["fc.weight"])
        ('', 'model.', 1)
    """
    model_set, checkpoint_list = set(model_keys), list(checkpoint_keys)
    by_tail: dict[str, list[str]] = {}
    for key in model_set:
        for cut in _cuts(key):
            by_tail.setdefault(key[cut:], []).append(key[:cut])
    votes: Counter[tuple[str, str]] = Counter()
    for key in checkpoint_list:
        for cut in _cuts(key):  # the longest tail the model knows: the most specific evidence
            prefixes = by_tail.get(key[cut:])
            if prefixes is None or len(prefixes) > 8:
                continue
            weight = key[cut:].count(".") + 1
            for model_prefix in set(prefixes):
                votes[(key[:cut], model_prefix)] += weight
            break
    if not votes:
        return "", "", 0
    def rank(item: tuple[tuple[str, str], int]) -> tuple[int, int]:
        return item[1], -len(item[0][0])

    best = max(votes.items(), key=rank)
    pure = [item for item in votes.items() if not item[0][0] or not item[0][1]]
    if pure and best[0][0] and best[0][1]:
        best_pure = max(pure, key=rank)
        if 2 * best_pure[1] >= best[1]:
            best = best_pure
    (ckpt_prefix, model_prefix), _ = best
    count = sum(1 for key in checkpoint_list if key.startswith(ckpt_prefix)
                and model_prefix + key[len(ckpt_prefix):] in model_set)
    return ckpt_prefix, model_prefix, count


def describe_prefix(prefix: str) -> str:
    """What wrapped the model, from the parts of a key prefix."""
    parts = [p for p in prefix.split(".") if p]
    named = [_ORIGINS.get(p, f"a wrapping module's attribute '{p}'") for p in parts]
    return ", inside it ".join(named) if named else "no wrapper"


def apply_prefix(key: str, prefix: Prefix) -> str:
    strip, add = prefix
    if strip and key.startswith(strip):
        key = key[len(strip):]
    elif strip:
        return key
    return add + key


def discover_prefix(file_keys: Sequence[str], model_keys: Sequence[str]) -> Prefix:
    """The ``(strip, add)`` prefix pair that makes the most file keys name model keys (``("", "")``: none)."""
    strip, add, count = match_prefixes(model_keys, file_keys)
    if count <= len(set(file_keys) & set(model_keys)):
        return "", ""
    return strip, add


def strip_given(key: str, prefixes: Sequence[str]) -> tuple[str, str]:
    """Strip any of ``prefixes`` from the start of ``key``, repeatedly and in any order: (key, stripped)."""
    stripped = ""
    changed = True
    while changed:
        changed = False
        for prefix in prefixes:
            if prefix and key.startswith(prefix):
                key, stripped, changed = key[len(prefix):], stripped + prefix, True
    return key, stripped
