"""Explain a PyTorch error: paste a traceback or a message, get the cause and the fix.

Each error *family* has a stable id, the regexes that recognise its messages (every variant we know,
taken from PyTorch's source and from public issue reports), the usual cause, the fix, and, where one
exists, the id of the doctor check that catches the same mistake before it becomes an exception.

The families are data, in four modules read in this order: ``families_runtime`` (autograd, devices, memory,
CUDA), ``families_shapes`` (shapes, losses, dtypes), ``families_loading`` (checkpoints, data loading,
distributed, installation, export) and ``families_loop`` (the training loop's context-dependent causes);
the order matters, as a later family never re-explains what an earlier one did. ``torchwork explain`` is
:func:`torchwork.doctor.cli.cli_explain`.

Example:
    >>> from torchwork.doctor.explain import explain_text
    >>> [e.family for e in explain_text("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x784 and 512x10)")]
    ['matmul-shape']
    >>> print(explain_text("mat1 and mat2 shapes cannot be multiplied (64x784 and 512x10)")[0].detail)
    The layer expects 512 input features but received 784 (batch of 64). Set in_features=784 in that layer, or fix the reshape/flatten before it.
"""

from __future__ import annotations

import re

from torchwork.doctor.families_loading import LOADING_FAMILIES
from torchwork.doctor.families_loop import LOOP_FAMILIES
from torchwork.doctor.families_runtime import RUNTIME_FAMILIES
from torchwork.doctor.families_shapes import SHAPE_FAMILIES
from torchwork.doctor.family import FLAGS, Explanation, Family

# most specific first: a later family never re-explains a span an earlier one explained
FAMILIES: tuple[Family, ...] = (*RUNTIME_FAMILIES, *SHAPE_FAMILIES, *LOADING_FAMILIES, *LOOP_FAMILIES)

FAMILY_IDS = tuple(f.id for f in FAMILIES)


def _line_at(text: str, start: int, end: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line = text[line_start: line_end if line_end != -1 else len(text)].strip()
    return line if len(line) <= 300 else line[:297] + "..."


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_LIBRARY = re.compile(r"site-packages|dist-packages|[/\\]lib[/\\]python\d|[/\\]Lib[/\\]|^<")


def _user_frame_before(text: str, position: int) -> str | None:
    """'file:line' of the last traceback frame before ``position`` that is not library code."""
    found = None
    for frame in _FRAME.finditer(text, 0, position):
        if not _LIBRARY.search(frame.group("file")):
            found = f"{frame.group('file')}:{frame.group('line')}"
    return found


def _unwrap(text: str) -> tuple[str, str]:
    """The text with its line breaks removed: as a space, and (for words split by the wrap) as nothing."""
    return re.sub(r"[ \t]*\n[ \t]*", " ", text), re.sub(r"[ \t]*\n[ \t]*", "", text)


def explain_text(text: str, context: str = "") -> list[Explanation]:
    """Every error family recognised in ``text``, most specific first.

    A later family never re-explains a span an earlier one already explained. A message wrapped across
    lines (as pasted into an issue) is recognised too. ``context`` (e.g. the traceback's frames) is
    consulted by context-dependent patterns and causes, never matched as a message itself.
    """
    found: list[Explanation] = []
    spans: dict[int, list[tuple[int, int]]] = {0: [], 1: [], 2: []}
    texts = (text, *_unwrap(text))
    background = f"{text}\n{context}"
    for family in FAMILIES:
        explanation = _match(family, texts, spans, background)
        if explanation is not None:
            found.append(explanation)
    return found


def _match(family: Family, texts: tuple[str, ...], spans: dict[int, list[tuple[int, int]]],
           background: str) -> Explanation | None:
    for index, candidate in enumerate(texts):
        seen = False
        for pattern, needs in family.compiled():
            match = pattern.search(candidate)
            if match is None or (needs is not None and needs.search(background) is None):
                continue
            seen = True
            start, end = match.span()
            if any(start < s_end and s_start < end for s_start, s_end in spans[index]):
                continue
            spans[index].append((start, end))
            read = [_words(match.group(0))]
            if needs is not None:
                read.append(_context_words(background, needs.search(background)))
            detail = family.detail(match) if family.detail else None
            cause, fix = family.cause, family.fix
            for context, variant_cause, variant_fix in family.variants:
                hint = re.search(context, background, FLAGS)
                if hint:
                    cause, fix = variant_cause, variant_fix
                    read.append(_context_words(background, hint))
                    break
            override = family.case(match) if family.case else None
            if override:
                cause, fix = override
            location = _user_frame_before(candidate, start) if index == 0 else _user_frame_before(texts[0],
                                                                                                    len(texts[0]))
            read = [words for i, words in enumerate(read)
                    if words and not any(words in other or other in words for other in read[:i])]
            return Explanation(family.id, family.title, family.check, _line_at(candidate, start, end), cause, fix,
                               detail, location, tuple(read))
        if seen:  # found as written (already explained): its unwrapped copies are the same words
            return None
    return None


def _context_words(text: str, hint: re.Match[str] | None) -> str:
    """The line of ``text`` where a context pattern matched (a frame, a line of code), as words."""
    return _words(_line_at(text, hint.start(), hint.end())) if hint else ""


def _words(text: str, limit: int = 100) -> str:
    words = " ".join(text.split())
    return words if len(words) <= limit else words[: limit - 3] + "..."


def explain_exception(error: BaseException) -> Explanation | None:
    """The best explanation of an exception (its type and message, read with its traceback's frames), or None."""
    import traceback

    text = f"{type(error).__name__}: {error}"
    frames = "".join(traceback.format_tb(error.__traceback__)) if error.__traceback__ is not None else ""
    found = explain_text(text, context=frames)
    return found[0] if found else None


def family(family_id: str) -> Family:
    for item in FAMILIES:
        if item.id == family_id:
            return item
    raise KeyError(family_id)
