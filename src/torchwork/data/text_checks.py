"""Per-text tests of the data report: the key two texts share when they are "the same text", and what is
empty or garbled about one text.

Example:
    >>> from torchwork.data.text_checks import garbled_reasons, match_key, too_short
    >>> match_key("Great  MOVIE &amp; cast") == match_key("great movie & cast")
    True
    >>> garbled_reasons("It&#039;s fine"), too_short("  "), too_short("ok")
    (['html-entity'], 'whitespace only', None)
"""

from __future__ import annotations

import html
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,30});")
# C0 controls but tab, newline and carriage return; DEL; C1 controls (in text they are always debris).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_WORD_CHAR = re.compile(r"\w", re.UNICODE)


def match_key(text: str) -> str:
    """``text`` as compared for duplicates: HTML entities decoded, Unicode NFKC, case folded, runs of
    whitespace made one space, ends stripped."""
    for _ in range(3):  # "&amp;amp;" is two layers of escaping
        unescaped = html.unescape(text)
        if unescaped == text:
            break
        text = unescaped
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def too_short(text: str) -> str | None:
    """Why ``text`` is too short to mean anything (empty, whitespace only, no letter or digit, one
    character), or None."""
    if not text:
        return "empty"
    if not text.strip():
        return "whitespace only"
    word_chars = len(_WORD_CHAR.findall(text))
    if word_chars == 0:
        return "no letter or digit"
    if word_chars == 1:
        return "one character"
    return None


def garbled_reasons(text: str) -> list[str]:
    """What is garbled in ``text``: ``undecodable`` (U+FFFD, bytes the file's encoding could not decode),
    ``control-character``, ``html-entity`` (``&#039;`` left undecoded), ``mojibake`` (UTF-8 read as
    another encoding, by ftfy's badness measure)."""
    if text.isascii() and text.isprintable() and "&" not in text:
        return []
    reasons = []
    if "\ufffd" in text:
        reasons.append("undecodable")
    if _CONTROL.search(text):
        reasons.append("control-character")
    if any(html.unescape(m.group()) != m.group() for m in _ENTITY.finditer(text)):
        reasons.append("html-entity")
    if not text.isascii():
        from ftfy.badness import is_bad

        if is_bad(text):
            reasons.append("mojibake")
    return reasons
