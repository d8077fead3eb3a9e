"""Text cleaning a user can read and configure: each step is one small named function.

The steps run in this order (each can be switched off in :class:`CleaningConfig`):

1. ``fix_mojibake``: replace the byte garbage that curly quotes, dashes and ellipses became in
   scraped tweets (a table of the sequences seen in the CrowdFlower data), then let ``ftfy`` repair
   what it can (mis-decoded UTF-8, HTML entities such as ``&amp;``, ``\\r`` line breaks, curly quotes).
   A re-decoding by ftfy that would turn garbage into letters of another script is not taken.
2. ``strip_mojibake``: remove what cannot be repaired: runs of two or more Latin-1 symbols or C1 control
   characters (``Õ¢_ŠÎ``), which no language writes; a single accented letter (``café``) is kept.
3. ``urls``, ``mentions``, ``numbers``: replace by the tokens ``<url>``, ``<user>``, ``<num>``.
4. ``lowercase``, then ``whitespace``: collapse runs of whitespace into one space and strip the ends.

Cleaning is idempotent (``clean(clean(t)) == clean(t)``), so a dataset cleaned once can be cleaned again
by the same preprocessing at serving time without changing.

Example:
    >>> from torchwork.data.cleaning import CleaningConfig, clean_text
    >>> clean_text("@united   Flight 89 was LATE &amp; https://t.co/x")
    '<user> flight <num> was late & <url>'
    >>> clean_text("Call @bob", CleaningConfig(mentions=None, lowercase=False))
    'Call @bob'
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.errors import ConfigError, DataError

# Byte garbage -> the character it once was. Three families occur in the tweets file (read as Latin-1):
# the prefixes "\xe4\xf3", "\x8a\x97" and "\xd5\xa2_\x8a\xce" stand for the UTF-8 lead bytes E2 80 of
# the General Punctuation block, and the tail says which character. Read off real rows, e.g.
# "It\xe4\xf3\xbbs a sad day" (It's) and "(CBS/AP) \xd5\xa2_\x8a\xce_\xd1\x9d Audi" (an em dash).
MOJIBAKE: dict[str, str] = {
    "\xd5\xa2_\x8a\xce\x81\xd0": "\u201c", "\xd5\xa2_\x8a\xce\xeb\x9d": "\u201d",
    "\xd5\xa2_\x8a\xce_\x86\xa2": "\u2019", "\xd5\xa2_\x8a\xce\xeb_": "\u2026",
    "\xd5\xa2_\x8a\xce_\xd1\x9d": "\u2014", "\xd5\xa2_\x8a\xce_\xd1\xd2": "\u2013",
    "\xe4\xf3\xec": "\u201c", "\xe4\xf3\x9d": "\u201d", "\xe4\xf3\xbb": "\u2019", "\xe4\xf3\xd6": "\u2018",
    "\xe4\xf3\xf1": "\u2013", "\xe4\xf3\xee": "\u2014", "\xe4\xf3_": "\u2026",
    "\x8a\x97\x93": "\u201c", "\x8a\x97\x9d": "\u201d", "\x8a\x97\xc8": "\u2019", "\x8a\x97\x85": "\u2018",
    "\x8a\x97\x94": "\u2014", "\x8a\x97_": "\u2026",
}
# Longest first, so that a family's long form wins over a shorter one inside it.
_MOJIBAKE_RE = re.compile("|".join(re.escape(k) for k in sorted(MOJIBAKE, key=len, reverse=True)))
# Two or more Latin-1 symbols/letters in a row (underscores between them are part of the garbage), or
# any C1 control character. U+00A0 (no-break space) is whitespace, not garbage. A run of letters of one
# case ("ção", "ÜÖ") is a word and stays: see _residue_replacement.
_RESIDUE_RE = re.compile(r"_*(?:[\x80-\x9f\xa1-\xff]_*){2,}|[\x80-\x9f]")
_URL_RE = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_NUMBER_RE = re.compile(r"(?<![\w<])\d+(?:[.,:/]\d+)*(?![\w>])")
_SPACE_RE = re.compile(r"\s+")


@dataclasses.dataclass(frozen=True)
class CleaningConfig:
    """Which cleaning steps run. A replacement token of ``None`` leaves that kind of text alone.

    Example:
        >>> CleaningConfig(numbers=None).to_dict()["numbers"] is None
        True
    """

    fix_mojibake: bool = True
    strip_mojibake: bool = True
    urls: str | None = "<url>"
    mentions: str | None = "<user>"
    numbers: str | None = "<num>"
    lowercase: bool = True
    whitespace: bool = True
    drop_empty: bool = True
    drop_duplicates: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CleaningConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DataError(f"cleaning settings {unknown} are unknown to this torchwork (it knows "
                            f"{sorted(known)}); the file was written by another version. Refit the "
                            "preprocessing or upgrade torchwork.")
        return cls(**data)

    def special_tokens(self) -> list[str]:
        """The replacement tokens this config produces (a tokenizer keeps each one whole)."""
        return [t for t in (self.urls, self.mentions, self.numbers) if t]


# Printable ASCII without "&" (tab and newline allowed) is text that no fix below can change: mojibake and the
# table above need bytes above 0x7F; ftfy's fixes to ASCII need "&" (HTML entities), "\r" (line breaks) or
# other bytes below 0x20 (terminal escapes, control characters). Most tweets are such text, and ftfy is the
# slowest step: checking first keeps serving (the server cleans every request) and dataset loading fast.
_UNTOUCHED_BY_FTFY = re.compile(r"[\t\n\x20-\x25\x27-\x7e]*")


def _fix_mojibake(text: str) -> str:
    # The first test is the common case (printable ASCII without "&") in a fraction of the regex's time.
    if (text.isascii() and text.isprintable() and "&" not in text) or _UNTOUCHED_BY_FTFY.fullmatch(text):
        return text
    import ftfy

    text = _MOJIBAKE_RE.sub(lambda m: MOJIBAKE[m.group()], text)
    # A lone C1 control is not read as Windows-1252 punctuation: in scraped text it is a fragment of
    # garbage (ftfy would turn "_\x99\x85" into "_™…"); decode cp1252 files as cp1252 instead.
    fixed, explanation = ftfy.fix_and_explain(text, fix_c1_controls=False)
    if fixed == text or _plausible_repair(text, fixed, explanation or []):
        return fixed
    # ftfy "decoded" garbage into other garbage (Armenian or Greek letters from mangled emoji bytes):
    # keep its safe fixes only and leave the bytes to strip_mojibake.
    return ftfy.fix_text(text, fix_encoding=False, fix_c1_controls=False, fix_line_breaks=False)


def _residue_replacement(match: re.Match[str]) -> str:
    run = match.group()
    return run if run.isalpha() and (run.islower() or run.isupper()) else " "


def _is_residue(text: str) -> bool:
    return any(_residue_replacement(m) == " " for m in _RESIDUE_RE.finditer(text))


def _plausible_repair(before: str, after: str, explanation: Sequence[tuple[str, str]]) -> bool:
    """True when ftfy's fix re-read UTF-8 bytes (or fixed no encoding at all), left no garbage and
    introduced only Latin letters, punctuation, symbols or emoji.

    Tuned for Latin-script text (the datasets here are English); switch ``fix_mojibake`` off for text in
    other scripts.
    """
    decodes = [codec for action, codec in explanation if action == "decode"]
    if _is_residue(after) or (decodes and not any(c.startswith("utf-8") for c in decodes)):
        return False
    return all(_latin_or_symbol(c) for c in set(after) - set(before))


# Latin letters (0000-024F, 1E00-1EFF), punctuation, currency and letterlike symbols (2000-214F),
# arrows to dingbats (2190-2BFF) and emoji (1F000 and up).
_LATIN_OR_SYMBOL = ((0, 0x24F), (0x1E00, 0x1EFF), (0x2000, 0x214F), (0x2190, 0x2BFF), (0x1F000, 0x1FAFF))


def _latin_or_symbol(char: str) -> bool:
    return any(low <= ord(char) <= high for low, high in _LATIN_OR_SYMBOL)


@functools.lru_cache(maxsize=8)
def _mention_re(tokens: tuple[str, ...]) -> re.Pattern[str]:
    # Not after a word character (an e-mail address) nor after a replacement token ("0@a" becomes
    # "<num>@a", which must stay as it is when cleaned again); "@a@b" (handles glued together) is one.
    after_token = "".join(f"(?<!{re.escape(token)})" for token in tokens)
    return re.compile(rf"(?<![\w@]){after_token}@\w+(?:@\w+)*")


@functools.lru_cache(maxsize=16)
def steps(config: CleaningConfig) -> tuple[tuple[str, Callable[[str], str]], ...]:
    """The enabled per-text steps of ``config``, in the order they run, as ``(name, function)`` pairs."""
    chosen: list[tuple[str, Callable[[str], str]]] = []
    if config.fix_mojibake:
        chosen.append(("fix_mojibake", _fix_mojibake))
    if config.strip_mojibake:  # residue is made of characters above 0x7F: ASCII text has none
        chosen.append(("strip_mojibake", lambda t: t if t.isascii() else _RESIDUE_RE.sub(_residue_replacement, t)))
    mention_re = _mention_re(tuple(config.special_tokens()))
    for name, pattern in (("urls", _URL_RE), ("mentions", mention_re), ("numbers", _NUMBER_RE)):
        token = getattr(config, name)
        if token is not None:
            chosen.append((name, functools.partial(pattern.sub, token)))
    if config.lowercase:
        chosen.append(("lowercase", str.lower))
    if config.whitespace:
        chosen.append(("whitespace", lambda t: _SPACE_RE.sub(" ", t).strip()))
    return tuple(chosen)


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise ConfigError(f"cleaning expects a str, got {type(text).__name__}: {text!r:.60}. Decode "
                          "bytes first (text.decode('utf-8')) and turn missing values into ''.")


def clean_text(text: str, config: CleaningConfig | None = None) -> str:
    """Clean one text with every enabled step of ``config`` (the defaults when None)."""
    _check_text(text)
    chosen = steps(config or CleaningConfig())
    return _until_stable(_apply(chosen, text), chosen)


def _apply(chosen: tuple[tuple[str, Callable[[str], str]], ...], text: str) -> str:
    for _, step in chosen:
        text = step(text)
    return text


def _until_stable(text: str, chosen: tuple[tuple[str, Callable[[str], str]], ...], passes: int = 2) -> str:
    """Clean again while that changes a non-ASCII text: lowercasing can make text the mojibake steps
    repair ("Ƒ¢" lowercases to "ƒ¢", cp1252 bytes of "Ģ"), and cleaning must be idempotent because a
    server cleans text that may be clean already. ASCII text is stable after one pass."""
    for _ in range(passes):
        if text.isascii():
            return text
        again = _apply(chosen, text)
        if again == text:
            return text
        text = again
    return text


@dataclasses.dataclass
class CleaningReport:
    """How many rows each step changed (``changed``) or removed (``removed``)."""

    rows_in: int = 0
    changed: dict[str, int] = dataclasses.field(default_factory=dict)
    removed: dict[str, int] = dataclasses.field(default_factory=dict)
    label_conflicts: int = 0

    @property
    def rows_out(self) -> int:
        return self.rows_in - sum(self.removed.values())

    def to_dict(self) -> dict[str, Any]:
        return {"rows_in": self.rows_in, "rows_out": self.rows_out, "changed": dict(self.changed),
                "removed": dict(self.removed), "label_conflicts": self.label_conflicts}

    def __str__(self) -> str:
        lines = [f"cleaning: {self.rows_in:,} rows in, {self.rows_out:,} out"]
        lines += [f"  {name:<15} changed {count:>7,} rows" for name, count in self.changed.items()]
        lines += [f"  {name:<15} removed {count:>7,} rows" for name, count in self.removed.items()]
        if self.label_conflicts:
            lines.append(f"  ({self.label_conflicts:,} duplicated texts had different labels; the first "
                         "row's label was kept)")
        return "\n".join(lines)


def clean_texts(texts: Sequence[str], labels: Sequence[Any] | None = None,
                config: CleaningConfig | None = None) -> tuple[list[str], list[Any], CleaningReport]:
    """Clean every text, drop empty and duplicate ones, and report what each step did.

    Duplicates are found after cleaning, so two tweets that differ only in a link or a mention count as
    one; the first occurrence is kept with its label. Returns ``(texts, labels, report)``; ``labels`` is
    an empty list when none were given.

    Example:
        >>> texts, labels, report = clean_texts(["Hi  @a", "hi @b", "   "], [0, 1, 0])
        >>> texts, labels, report.removed
        (['hi <user>'], [0], {'empty': 1, 'duplicates': 1})
    """
    config = config or CleaningConfig()
    if labels is not None and len(labels) != len(texts):
        raise DataError(f"clean_texts got {len(texts)} texts but {len(labels)} labels; pass one label per "
                        "text.")
    report = CleaningReport(rows_in=len(texts))
    for text in texts:
        _check_text(text)
    current = list(texts)
    chosen = steps(config)
    for name, step in chosen:
        after = [step(t) for t in current]
        report.changed[name] = sum(a != b for a, b in zip(after, current))
        current = after
    current = [_until_stable(t, chosen) for t in current]  # exactly what clean_text gives
    keep_labels = list(labels) if labels is not None else [None] * len(current)
    rows = list(zip(current, keep_labels))
    if config.drop_empty:
        kept = [(t, y) for t, y in rows if t.strip()]
        report.removed["empty"] = len(rows) - len(kept)
        rows = kept
    if config.drop_duplicates:
        first: dict[str, Any] = {}
        conflicts: set[str] = set()
        for t, y in rows:
            if t not in first:
                first[t] = y
            elif first[t] != y:
                conflicts.add(t)
        report.removed["duplicates"] = len(rows) - len(first)
        report.label_conflicts = len(conflicts)
        rows = list(first.items())
    return [t for t, _ in rows], ([y for _, y in rows] if labels is not None else []), report

