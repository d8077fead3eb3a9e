"""Finding the wrapper prefix between a file's keys and a model's keys by matching, not from a fixed list.

A ``module.`` (DDP/DataParallel), ``_orig_mod.`` (``torch.compile``), ``model.``/``bert.`` (a wrapper
class), or any nesting of them, is found as the one prefix whose removal (from the file's keys) or
addition (when the model is the wrapped one) makes the most keys match.

Example:
    >>> discover_prefix(["module._orig_mod.fc.weight", "module._orig_mod.fc.bias"], ["fc.weight", "fc.bias"])
    ('module._orig_mod.', '')
    >>> discover_prefix(["fc.weight"], ["backbone.fc.weight"])
    ('', 'backbone.')
    >>> apply_prefix("module.fc.weight", ("module.", ""))
    'fc.weight'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

Prefix = tuple[str, str]  # (stripped from the file's keys, added to them)


def apply_prefix(key: str, prefix: Prefix) -> str:
    strip, add = prefix
    if strip and key.startswith(strip):
        key = key[len(strip):]
    elif strip:
        return key
    return add + key


def _splits(key: str) -> Iterable[tuple[str, str]]:
    """``("a.", "b.c")``, ``("a.b.", "c")`` for ``"a.b.c"``: every prefix ending at a dot, and the rest."""
    start = key.find(".")
    while start != -1:
        yield key[: start + 1], key[start + 1:]
        start = key.find(".", start + 1)


def discover_prefix(file_keys: Sequence[str], model_keys: Sequence[str]) -> Prefix:
    """The ``(strip, add)`` prefix pair that makes the most file keys name model keys (``("", "")``: none)."""
    model_set, file_set = set(model_keys), set(file_keys)
    votes: Counter[Prefix] = Counter()
    for key in file_set:
        for head, rest in _splits(key):
            if rest in model_set:
                votes[(head, "")] += 1
    for key in model_set:
        for head, rest in _splits(key):
            if rest in file_set:
                votes[("", head)] += 1
    best, best_count = ("", ""), len(file_set & model_set)
    for candidate, _ in votes.most_common(8):
        count = sum(apply_prefix(k, candidate) in model_set for k in file_set)
        shorter = len(candidate[0] + candidate[1]) < len(best[0] + best[1])
        if count > best_count or (count == best_count and count and shorter and best != ("", "")):
            best, best_count = candidate, count
    return best


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
