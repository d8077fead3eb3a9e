"""Class names spelled more than one way: ``positive`` and ``Positive``, ``very_good`` and ``very good``.

A label column typed by hand, or merged from two exports, often holds one class under several spellings.
Read as they are, each spelling is a class of its own: the model is asked to tell ``positive`` from
``Positive``, the smaller spelling shows up as a rare class, and scores are split between them. Two names
are the same class here when they are equal after Unicode compatibility normalisation (NFKC), case folding,
and runs of spaces, ``_`` and ``-`` between letters or digits read as one space (a sign stays: ``-1`` is not
``1``, ``A-`` is not ``A``). A merge maps every spelling to its group's most frequent one (the first in sorted
order on a tie), so a file whose labels are all spelled one way keeps them.

Example:
    >>> labels = ["positive"] * 5 + ["Positive", "negative", "negative", "very_good", "Very Good"]
    >>> label_variants(labels)
    {'positive': ['positive', 'Positive'], 'very good': ['Very Good', 'very_good']}
    >>> merged_spellings(labels)
    {'Positive': 'positive', 'very_good': 'Very Good'}
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

# Only between letters or digits: "-1" and "1", "A-" and "A" are different classes
_SEPARATORS = re.compile(r"(?<=\w)[\s_\-]+(?=\w)")


def label_key(label: str) -> str:
    """What two spellings of one class share (see the module).

    Example:
        >>> label_key("  Very_GOOD ") == label_key("very-good") == label_key("very good")
        True
        >>> label_key("-1") == label_key("1"), label_key("A-") == label_key("A")
        (False, False)
    """
    return _SEPARATORS.sub(" ", unicodedata.normalize("NFKC", label).casefold().strip())


def label_variants(labels: Sequence[str]) -> dict[str, list[str]]:
    """``{key: spellings}`` for each class spelled more than one way, its spellings most frequent first."""
    counts = Counter(labels)
    groups: dict[str, list[str]] = {}
    for spelling in sorted(counts):
        groups.setdefault(label_key(spelling), []).append(spelling)
    return {key: sorted(spellings, key=lambda s: (-counts[s], s))
            for key, spellings in sorted(groups.items()) if len(spellings) > 1}


def merged_spellings(labels: Sequence[str]) -> dict[str, str]:
    """``{spelling: the group's most frequent spelling}`` for every spelling a merge changes."""
    return dict(_respelled(label_variants(labels)))


def _respelled(groups: dict[str, list[str]]) -> list[tuple[str, str]]:
    """``(spelling, its group's most frequent spelling)`` for each spelling of ``groups`` a merge changes."""
    return [(spelling, spellings[0]) for spellings in groups.values() for spelling in spellings[1:]]


def shown_spelling(label: str) -> str:
    """``label`` quoted, and marked when it is not in Unicode's composed form: ``'café'`` typed on one machine
    and ``'café'`` (e + a combining accent, as macOS names files) on another print alike otherwise.

    Example:
        >>> shown_spelling("caf\u00e9"), shown_spelling("cafe\u0301").endswith("(decomposed: 'cafe\\\\u0301')")
        ("'café'", True)
    """
    if unicodedata.normalize("NFC", label) == label:
        return repr(label)
    return f"{label!r} (decomposed: {ascii(label)})"


@dataclasses.dataclass(frozen=True)
class SpellingFacts:
    """What a ``label-variants`` finding says of ``labels`` (a text file's label column, or each image's class
    folder): the groups, how many rows each spelling has, and the rows a merge would respell.

    Example:
        >>> facts = SpellingFacts.of(["cat", "cat", "Cat", "dog"])
        >>> facts.summary(), facts.respelled(), facts.first["Cat"], facts.respelled_rows()
        ("'cat' ×2 / 'Cat' ×1", [('Cat', 'cat')], 2, [2])
    """

    labels: Sequence[str]
    groups: dict[str, list[str]]
    counts: Counter[str]
    first: dict[str, int]  # each spelling's first row index

    @classmethod
    def of(cls, labels: Sequence[str]) -> SpellingFacts:
        first: dict[str, int] = {}
        for i, label in enumerate(labels):
            first.setdefault(label, i)
        return cls(labels, label_variants(labels), Counter(labels), first)

    def summary(self) -> str:
        return "; ".join(" / ".join(f"{shown_spelling(s)} ×{self.counts[s]:,}" for s in spellings)
                         for spellings in self.groups.values())

    def respelled(self) -> list[tuple[str, str]]:
        """``(spelling, the group's most frequent spelling)`` for each spelling a merge changes."""
        return _respelled(self.groups)

    def respelled_rows(self) -> list[int]:
        minority = {s for s, _ in self.respelled()}
        return [i for i, label in enumerate(self.labels) if label in minority]
