"""What the split plan leaves unscored, as data-report findings shared by text files and image folders.

- ``empty-split`` (error): a validation or test split without a row, which fit cannot choose or score a
  model without;
- ``class-not-in-test`` (error): a trained class the test split has no row of (its F1 of 0 would lower the
  macro-F1 that chooses the served model); ``class-not-in-validation`` (warning): early stopping and the
  best checkpoint are chosen without it.

A planned split gives each class of 2 rows a test row and of 3 or more a validation row too
(:func:`torchwork.data.splits.stratified_split`), so these are found where a class is smaller, or where the
user's own splits (a split column, a test file, ``train/ test/`` folders) leave a class or a split out.

Example:
    >>> from torchwork.data.splits import SplitPlan
    >>> plan = SplitPlan(indices={"train": [0, 1, 2], "validation": [], "test": [3]},
    ...                  labels=["a", "b", "c", "a"], dropped={})
    >>> [f.kind for f in split_findings(plan, Layout("row", planned=True))]
    ['empty-split', 'class-not-in-test']
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

from torchwork.data.findings import Finding, finding

SPLIT_ORDER = ("train", "validation", "test")

# Per evaluation split: the finding's kind and severity, the least rows a class needs for a planned split to
# give it one, and why a class without one matters.
_UNSCORED = {
    "test": ("class-not-in-test", "error", 2, "the model learns them but the test scores cannot measure them "
             "(each would count as F1 0 in the macro-F1 that chooses the served model)"),
    "validation": ("class-not-in-validation", "warning", 3, "early stopping and the best checkpoint are chosen "
                   "without them"),
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the data is split, for the findings' words: ``unit`` ("row", "image"); ``planned`` when torchwork
    planned every split; ``add`` (split -> how to add rows of a class to that split in the user's own
    layout, ``{cls}`` standing for the classes), used when not planned."""

    unit: str
    planned: bool
    add: dict[str, str] = dataclasses.field(default_factory=dict)
    empty_fix: str = ""


def split_classes(plan: Any) -> dict[str, set[str]]:
    """``{class: the splits that hold its rows}`` after duplicates and ties are dropped."""
    found: dict[str, set[str]] = defaultdict(set)
    for name, part in plan.indices.items():
        for j in part:
            found[plan.labels[j]].add(name)
    return found


def _empty_split(plan: Any, layout: Layout) -> Finding | None:
    empty = [name for name in SPLIT_ORDER if not plan.indices[name]]
    if not empty:
        return None
    fix = layout.empty_fix or (f"give each class at least 3 {layout.unit}s (copies count once): torchwork then puts "
                               "one or more of each in the validation and the test split")
    return finding("empty-split", "error", len(empty), [{"split": name} for name in empty], fix,
                   f"the {' and '.join(empty)} split(s) hold no {layout.unit}: fit cannot choose or score a model")


def _unscored(plan: Any, layout: Layout) -> list[Finding]:
    found = split_classes(plan)
    train_counts = Counter(plan.labels[j] for j in plan.indices["train"])
    out: list[Finding] = []
    for split, (kind, severity, least, why) in _UNSCORED.items():
        missing = sorted(c for c, splits in found.items() if "train" in splits and split not in splits)
        if not missing or not plan.indices[split]:
            continue
        fix = (f"give each class at least {least} {layout.unit}s (copies count once) so that torchwork puts one in "
               f"the {split} split, or remove the class" if layout.planned
               else layout.add.get(split, f"add {split} {layout.unit}s of these classes, or remove them"))
        out.append(finding(kind, severity, len(missing),
                           [{"class": c, f"train_{layout.unit}s": train_counts[c]} for c in missing], fix,
                           f"{len(missing)} class(es) have no {split} {layout.unit}: {why}: "
                           + ", ".join(repr(c) for c in missing[:10])))
    return out


def split_findings(plan: Any, layout: Layout) -> list[Finding]:
    """``empty-split``, ``class-not-in-test`` and ``class-not-in-validation`` of ``plan`` (a
    :class:`~torchwork.data.splits.SplitPlan`), worded for ``layout``."""
    empty = _empty_split(plan, layout)
    return ([empty] if empty else []) + _unscored(plan, layout)
