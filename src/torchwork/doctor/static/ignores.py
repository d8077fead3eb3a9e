"""``# torchwork: ignore[check-id]`` comments: a finding on that line with that id is not reported.

``# torchwork: ignore[a, b]`` names several checks; ``# torchwork: ignore`` alone silences every check
on its line. Only real comments count (read with :mod:`tokenize`): the same words inside a string do not.

Example:
    >>> ignored_lines(b"x = 1  # torchwork: ignore[missing-zero-grad]\\ny = '# torchwork: ignore'\\n")
    {1: frozenset({'missing-zero-grad'})}
"""

from __future__ import annotations

import io
import re
import tokenize

EVERY = "*"
_COMMENT = re.compile(r"#\s*torchwork:\s*ignore\b(?:\[(?P<ids>[^\]]*)\])?")


def ignored_lines(source: bytes) -> dict[int, frozenset[str]]:
    """Line number -> the check ids its comment ignores (``{"*"}``: every check)."""
    lines: dict[int, frozenset[str]] = {}
    if b"torchwork:" not in source:
        return lines  # no comment to read: skip the tokenizer
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _COMMENT.search(token.string)
            if match:
                ids = match.group("ids")
                names = frozenset(i.strip() for i in ids.split(",") if i.strip()) if ids is not None else None
                lines[token.start[0]] = names or frozenset({EVERY})
    except (tokenize.TokenError, SyntaxError):
        pass  # the comments read so far still count; the parse reports the file's error
    return lines


def is_ignored(lines: dict[int, frozenset[str]], line: int, check: str) -> bool:
    ids = lines.get(line, frozenset())
    return check in ids or EVERY in ids
