"""An error family (:class:`Family`) and what recognising one in a text gives (:class:`Explanation`).

The families themselves are data, in ``families_runtime``, ``families_shapes``, ``families_loading`` and
``families_loop``; :mod:`torchwork.doctor.explain` reads them in that order.

Example:
    >>> family = Family("demo", "a demonstration", ("it broke at (?P<where>[a-z]+)",), "A cause.", "A fix.")
    >>> family.compiled()[0][0].search("It broke at here").group("where")
    'here'
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

Detail = Callable[["re.Match[str]"], str | None]
FLAGS = re.IGNORECASE | re.MULTILINE  # every pattern and context of a family is read with these


@dataclasses.dataclass(frozen=True)
class Family:
    """One family of PyTorch error messages.

    A pattern is a regex, or ``(regex, context)``: then it counts only when ``context`` also matches the
    text or its traceback (the frames say whether ``expected scalar type Long`` came from a loss's target).
    ``variants`` are ``(context, cause, fix)``: the first whose context matches replaces the default cause
    and fix (the same warning means another thing under a GradScaler).
    """

    id: str
    title: str
    patterns: tuple[str | tuple[str, str], ...]
    cause: str
    fix: str
    check: str | None = None  # the doctor check that reports the same mistake
    detail: Detail | None = None  # a sentence built from the message itself (shapes, devices, keys)
    variants: tuple[tuple[str, str, str], ...] = ()
    # (cause, fix) read from the message itself, replacing the family's (the entry a checkpoint wraps)
    case: Callable[[re.Match[str]], tuple[str, str] | None] | None = None

    def compiled(self) -> tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]:
        return _compiled(self)


@dataclasses.dataclass
class Explanation:
    """A family recognised in a text: where (the matching line), why, and what to do."""

    family: str
    title: str
    check: str | None
    matched: str
    cause: str
    fix: str
    detail: str | None = None
    location: str | None = None  # the last frame of the user's code in a pasted traceback
    read: tuple[str, ...] = ()  # the words of the text the explanation rests on (message, then frames)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def format(self) -> str:
        lines = [f"[{self.family}] {self.title}", f"  matched: {self.matched}"]
        if self.read:
            lines.append("  read:    " + " + ".join(repr(words) for words in self.read))
        if self.location:
            lines.append(f"  at:      {self.location} (your code's last line in the traceback)")
        if self.detail:
            lines.append(f"  here:    {self.detail}")
        lines.append(f"  cause:   {self.cause}")
        lines.append(f"  fix:     {self.fix}")
        if self.check:
            lines.append(f"  `torchwork doctor SCRIPT` reports this as [{self.check}] with your file:line.")
        return "\n".join(lines)


_COMPILED: dict[str, tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]] = {}


def _compiled(family: Family) -> tuple[tuple[re.Pattern[str], re.Pattern[str] | None], ...]:
    patterns = _COMPILED.get(family.id)
    if patterns is None:
        patterns = _COMPILED[family.id] = tuple(
            (re.compile(p, FLAGS), None) if isinstance(p, str) else (re.compile(p[0], FLAGS), re.compile(p[1], FLAGS))
            for p in family.patterns)
    return patterns
