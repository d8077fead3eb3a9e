"""Splits that cannot leak: rows with the same normalised text form one group, and groups (not rows) are
split, seeded and stratified by label, so no text is in two splits.

Before splitting, each group is reduced to what training should see: one row per group (the first), under
the group's most frequent label; a group whose labels tie is dropped (:mod:`torchwork.data.audit` reports
both as ``duplicate`` and ``conflicting-labels``). Rows too short to mean anything are dropped too. A class
of 2 groups or more gets at least one test group, of 3 or more a validation group too, so that each class
the model learns is scored.

Example:
    >>> from torchwork.data.splits import grouped_split
    >>> texts = [f"review {i}" for i in range(20)] + ["Review 0"]
    >>> plan = grouped_split(texts, ["a", "b"] * 10 + ["a"], seed=0)
    >>> sorted(len(part) for part in plan.indices.values()), plan.dropped["duplicate"]
    ([2, 2, 16], 1)
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from torchwork.data.text_checks import match_key, too_short
from torchwork.errors import ConfigError
from torchwork.finite import is_finite_number
from torchwork.quoting import quote_value
from torchwork.seeding import check_seed

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """Which rows (indices into the input) go to each split, the label each is trained with, and the rows
    left out, by reason."""

    indices: dict[str, list[int]]
    labels: list[str]
    dropped: dict[str, int]

    def counts(self) -> dict[str, dict[str, object]]:
        """``{split: {"rows": n, "classes": {label: n}, "sha256": ...}}``, as the data report shows it."""
        out: dict[str, dict[str, object]] = {}
        for name, rows in self.indices.items():
            classes = Counter(self.labels[i] for i in rows)
            out[name] = {"rows": len(rows), "classes": dict(sorted(classes.items())), "sha256": self.digest(name)}
        return out

    def digest(self, name: str) -> str:
        """A hash of split ``name``'s rows and labels: the same file, seed and settings give the same one."""
        joined = "\n".join(f"{i}\t{self.labels[i]}" for i in self.indices[name])
        # A label from a file name that is not UTF-8 (a Windows zip) holds surrogates: hashed as its bytes.
        return hashlib.sha256(joined.encode("utf-8", "surrogateescape")).hexdigest()


def training_rows(texts: Sequence[str], labels: Sequence[str]) -> tuple[list[int], list[str], dict[str, int]]:
    """``(kept, labels, dropped)``: the first row of each group of equal normalised texts, under the group's
    most frequent label; tied groups and too-short texts left out (``dropped`` counts them by reason)."""
    groups: dict[str, list[int]] = {}
    for index, text in enumerate(texts):
        groups.setdefault(match_key(text), []).append(index)
    chosen = list(labels)
    kept: list[int] = []
    dropped = {"duplicate": 0, "conflicting-labels": 0, "empty-text": 0}
    for key, members in groups.items():
        if not key or too_short(texts[members[0]]):
            dropped["empty-text"] += len(members)
            continue
        ranked = Counter(labels[i] for i in members).most_common(2)
        if len(ranked) == 2 and ranked[0][1] == ranked[1][1]:  # a tie: no label to keep
            dropped["conflicting-labels"] += len(members)
            continue
        chosen[members[0]] = str(ranked[0][0])
        kept.append(members[0])
        dropped["duplicate"] += len(members) - 1
    return sorted(kept), chosen, dropped


def _check_fractions(fractions: object) -> tuple[float, float, float]:
    """``fractions`` as three floats when they are three finite, non-negative numbers that sum to 1 (within
    1e-6), else a ConfigError quoting them (NaN, inf and 10**400 included) before any row is split."""
    values = fractions.tolist() if isinstance(fractions, np.ndarray) else fractions
    if (isinstance(values, (tuple, list)) and len(values) == 3 and all(is_finite_number(f) and f >= 0 for f in values)
            and abs(math.fsum(values) - 1) <= 1e-6):  # float32's (0.8, 0.1, 0.1) sums to 1 + 1.5e-8
        return float(values[0]), float(values[1]), float(values[2])
    if isinstance(values, (tuple, list)):  # each item quoted: repr() of a 5000-digit one raises
        shown = "(" + ", ".join(quote_value(f) for f in values[:4]) + (", ...)" if len(values) > 4 else ")")
    else:
        shown = quote_value(values)
    raise ConfigError(f"fractions={shown} must be three finite, non-negative numbers that sum to 1, e.g. "
                      "(0.8, 0.1, 0.1).")


def _class_counts(n: int, fractions: tuple[float, float, float]) -> tuple[int, int]:
    """``(validation, test)`` rows of a class of ``n`` rows: ``fractions`` of it, rounded, and at least one for
    each split with a share while one row is left for training, test first. So a class of 2 rows gets a test
    row, one of 3 or more a validation row too, and a class of 1 trains only.

    Example:
        >>> [_class_counts(n, (0.8, 0.1, 0.1)) for n in (1, 2, 3, 5, 15)]
        [(0, 0), (0, 1), (1, 1), (1, 1), (2, 2)]
    """
    n_val, n_test = round(n * fractions[1]), round(n * fractions[2])
    if n_test == 0 and fractions[2] > 0 and n - n_val > 1:
        n_test = 1
    if n_val == 0 and fractions[1] > 0 and n - n_test > 1:
        n_val = 1
    return n_val, n_test


def stratified_split(labels: Sequence[int] | np.ndarray, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices of train / validation / test: each class is split in ``fractions``, seeded; a small class
    still gets a test row (2 rows or more) and a validation row (3 or more): see :func:`_class_counts`.

    Example:
        >>> train, val, test = stratified_split([0] * 10 + [1] * 20, seed=0)
        >>> len(train), len(val), len(test)
        (24, 3, 3)
    """
    fractions = _check_fractions(fractions)
    check_seed(seed)
    label_array = np.asarray(labels)
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[], [], []]
    for label in np.unique(label_array):
        rows = rng.permutation(np.flatnonzero(label_array == label))
        n_val, n_test = _class_counts(len(rows), fractions)
        parts[0].append(rows[n_val + n_test:])
        parts[1].append(rows[:n_val])
        parts[2].append(rows[n_val:n_val + n_test])
    train, val, test = (np.sort(np.concatenate(p)) if p else np.array([], dtype=np.int64) for p in parts)
    return train, val, test


def grouped_split(texts: Sequence[str], labels: Sequence[str], *,
                  fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0) -> SplitPlan:
    """Train, validation and test rows of ``texts``: one row per normalised text (see the module),
    stratified by label, seeded."""
    _check_fractions(fractions)  # every setting before the texts are grouped
    check_seed(seed)
    kept, chosen, dropped = training_rows(texts, labels)
    classes = sorted({chosen[i] for i in kept})
    parts = stratified_split([classes.index(chosen[i]) for i in kept], fractions, seed=seed)
    indices = {name: [kept[j] for j in part] for name, part in zip(SPLITS, parts)}
    return SplitPlan(indices, chosen, dropped)


def given_split(texts: Sequence[str], labels: Sequence[str], splits: Sequence[str], *,
                drop_leaked: bool = False, validation_fraction: float = 0.1, seed: int = 0) -> SplitPlan:
    """The split the user gave (a split column, or a test file): each split reduced as
    :func:`training_rows` does; with ``drop_leaked``, a row whose normalised text is in an earlier split
    (train before validation before test) is left out. Without a validation split, one is carved from
    train by :func:`grouped_split`."""
    indices: dict[str, list[int]] = {}
    dropped: Counter[str] = Counter()
    chosen = list(labels)
    seen: set[str] = set()
    for name in SPLITS:
        members = [i for i, s in enumerate(splits) if s == name]
        if drop_leaked:
            fresh = [i for i in members if match_key(texts[i]) not in seen]
            dropped["leaked"] += len(members) - len(fresh)
            members = fresh
        kept, part_labels, part_dropped = training_rows([texts[i] for i in members], [labels[i] for i in members])
        dropped.update(part_dropped)
        for j in kept:
            chosen[members[j]] = part_labels[j]
        indices[name] = [members[j] for j in kept]
        seen.update(match_key(texts[i]) for i in members)
    if not indices["validation"]:
        train = indices["train"]
        carved = grouped_split([texts[i] for i in train], [chosen[i] for i in train],
                               fractions=(1 - validation_fraction, validation_fraction, 0.0), seed=seed)
        indices["train"] = [train[j] for j in carved.indices["train"]]
        indices["validation"] = [train[j] for j in carved.indices["validation"]]
    return SplitPlan(indices, chosen, dict(dropped))
