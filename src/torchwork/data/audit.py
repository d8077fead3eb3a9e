"""The data report: what is wrong with a labelled text data set, found before any training.

Kinds (each a :class:`~torchwork.data.findings.Finding` with a severity, a count, examples and the fix):

- ``duplicate``: a text equal to an earlier row's, exactly or after normalisation (case, whitespace, HTML
  entities, Unicode form: :func:`~torchwork.data.text_checks.match_key`);
- ``cross-split-duplicate``: the same normalised text in two of the splits the user gave (a split column, or a
  test file): leakage that inflates every score. An error;
- ``conflicting-labels``: the same normalised text with different labels;
- ``label-variants``: one class spelled more than one way (``positive`` and ``Positive``:
  :mod:`torchwork.data.label_variants`). An error: each spelling would be a class of its own;
- ``empty-text``: empty, whitespace only, no letter or digit, one character;
- ``garbled-text``: undecodable bytes, control characters, undecoded HTML entities, mojibake;
- ``imbalance`` (the largest class over the smallest) and ``rare-class`` (fewer than 5 rows; fewer than 2 is an
  error: such a class cannot be in both training and test);
- ``truncated``: the share of texts longer than the model's ``max_length`` tokens;
- ``label-noise``: rows a cross-validated baseline is confident are mislabelled
  (:mod:`torchwork.data.label_noise`).

Every check is one pass over the rows with dictionaries keyed by the normalised text: no step compares
pairs of rows, so 30k rows take seconds (the label-noise baseline most of them).

Example:
    >>> from torchwork.data.audit import audit_texts
    >>> report = audit_texts(["Good film", "good  film", "bad", ""], ["pos", "neg", "neg", "neg"],
    ...                      label_noise=False)
    >>> sorted(f.kind for f in report.findings)
    ['conflicting-labels', 'duplicate', 'empty-text', 'imbalance', 'rare-class']
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from torchwork.data.findings import DataReport, Finding, example, finding
from torchwork.data.text import check_max_length
from torchwork.data.text_checks import garbled_reasons, match_key, too_short
from torchwork.errors import ConfigError
from torchwork.quoting import quote_value
from torchwork.seeding import check_seed

RARE_ROWS = 5
IMBALANCE_INFO, IMBALANCE_WARNING = 1.5, 10.0
TRUNCATED_WARNING = 0.05
SPLIT_ORDER = ("train", "validation", "test")


def _groups(keys: Sequence[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        groups[key].append(index)
    return groups


def _duplicates(texts: Sequence[str], rows: Sequence[int | str], groups: dict[str, list[int]]) -> Finding | None:
    exact = normalised = 0
    examples = []
    for key, members in groups.items():
        if len(members) < 2 or not key:
            continue
        first = members[0]
        for index in members[1:]:
            same = texts[index] == texts[first]
            exact += same
            normalised += not same
            how = "exact copy" if same else "equal after normalisation"
            examples.append(example(rows[index], texts[index], note=f"{how} of row {rows[first]}",
                                    first_row=rows[first], exact=same))
    count = exact + normalised
    if not count:
        return None
    examples.sort(key=lambda e: (e["exact"], _row_order(e["row"])))  # the normalised ones are the less obvious: first
    return finding(
        "duplicate", "warning", count, examples,
        "torchwork keeps one row of each group of equal texts for training and never puts one text in two "
        "splits; remove them from the file to keep the counts honest",
        f"{count:,} rows repeat an earlier row's text ({exact:,} exactly, {normalised:,} after normalisation)",
        sorted((e["row"] for e in examples), key=_row_order))


def _cross_split(texts: Sequence[str], rows: Sequence[int | str], splits: Sequence[str],
                 groups: dict[str, list[int]]) -> Finding | None:
    leaked, examples = 0, []
    for key, members in groups.items():
        by_split = {splits[i] for i in members}
        if len(by_split) < 2 or not key:
            continue
        first_split = min(by_split, key=_split_rank)
        owner = next(i for i in members if splits[i] == first_split)
        for index in members:
            if splits[index] != first_split:
                leaked += 1
                examples.append(example(rows[index], texts[index], split=splits[index],
                                        note=f"in {splits[index]}, also in {first_split} row {rows[owner]}"))
    if not leaked:
        return None
    return finding(
        "cross-split-duplicate", "error", leaked, examples,
        "--set drop_leaked=true removes these rows from the later split (validation, test); or fix the "
        "split in the file. Scores measured with them are inflated",
        f"{leaked:,} rows of a later split have a text that is also in an earlier one (leakage)",
        [e["row"] for e in examples])


def _row_order(row: int | str) -> tuple[str, int]:
    """Rows of the main file (numbers) first, then ``file:number`` rows, each in number order."""
    if isinstance(row, int):
        return ("", row)
    name, _, number = row.rpartition(":")
    return (name, int(number) if number.isdigit() else 0)


def _split_rank(name: str) -> int:
    return SPLIT_ORDER.index(name) if name in SPLIT_ORDER else len(SPLIT_ORDER)


def _conflicts(texts: Sequence[str], labels: Sequence[str], rows: Sequence[int | str],
               groups: dict[str, list[int]]) -> Finding | None:
    rows_hit, texts_hit, examples = 0, 0, []
    for key, members in groups.items():
        seen = Counter(labels[i] for i in members)
        if len(seen) < 2 or not key:
            continue
        texts_hit += 1
        rows_hit += len(members)
        summary = ", ".join(f"{label} ×{n}" for label, n in seen.most_common())
        examples.append(example(rows[members[0]], texts[members[0]], labels=dict(seen),
                                rows=[rows[i] for i in members], note=f"labelled {summary}"))
    if not rows_hit:
        return None
    return finding(
        "conflicting-labels", "warning", rows_hit, examples,
        "check these rows' labels in the file; for training torchwork keeps the most frequent label of each "
        "text and drops a text whose labels tie",
        f"{texts_hit:,} texts ({rows_hit:,} rows) carry more than one label",
        [row for e in examples for row in e["rows"]])


def _label_variants(texts: Sequence[str], labels: Sequence[str], rows: Sequence[int | str]) -> Finding | None:
    from torchwork.data.label_variants import SpellingFacts

    facts = SpellingFacts.of(labels)
    if not facts.groups:
        return None
    examples = [example(rows[facts.first[s]], texts[facts.first[s]], label=s, merged_into=usual,
                        note=f"labelled {s!r} ({facts.counts[s]:,} rows), {usual!r} spelled another way")
                for s, usual in facts.respelled()]
    hit = [rows[i] for i in facts.respelled_rows()]
    return finding(
        "label-variants", "error", len(hit), examples,
        "correct the spellings in the file, or let torchwork fit train each class under its most frequent "
        "spelling: --set merge_label_variants=true",
        f"{len(facts.groups)} class(es) spelled more than one way ({facts.summary()}): read as they are, each "
        "spelling is a class of its own", hit)


def _empty(texts: Sequence[str], rows: Sequence[int | str]) -> Finding | None:
    hits = [(i, reason) for i, text in enumerate(texts) if (reason := too_short(text))]
    if not hits:
        return None
    kinds = Counter(reason for _, reason in hits)
    return finding(
        "empty-text", "warning", len(hits), [example(rows[i], texts[i], note=reason) for i, reason in hits],
        "these rows are dropped before training (they carry no signal); fill in their text in the file if "
        "they should have one",
        f"{len(hits):,} rows are too short to mean anything ("
        + ", ".join(f"{n:,} {k}" for k, n in kinds.most_common()) + ")", [rows[i] for i, _ in hits])


def _garbled(texts: Sequence[str], rows: Sequence[int | str]) -> Finding | None:
    hits = [(i, reasons) for i, text in enumerate(texts) if (reasons := garbled_reasons(text))]
    if not hits:
        return None
    kinds = Counter(reason for _, reasons in hits for reason in reasons)
    return finding(
        "garbled-text", "warning", len(hits),
        [example(rows[i], texts[i], note=", ".join(reasons)) for i, reasons in hits],
        "the cleaning step repairs mojibake and HTML entities and removes control characters before "
        "training; undecodable bytes are lost: save the file as UTF-8 (or say its encoding) to keep them",
        f"{len(hits):,} rows hold garbled text (" + ", ".join(f"{n:,} {k}" for k, n in kinds.most_common()) + ")",
        [rows[i] for i, _ in hits])


def class_findings(labels: Sequence[str], unit: str = "rows") -> list[Finding]:
    """``imbalance`` (the largest class over the smallest) and ``rare-class`` (fewer than 5 ``unit``; fewer
    than 2 is an error) of ``labels``: one for each row (or image, with ``unit="images"``).

    Example:
        >>> [(f.kind, f.severity) for f in class_findings(["cat"] * 20 + ["dog"] * 3 + ["eel"])]
        [('imbalance', 'warning'), ('rare-class', 'error')]
    """
    counts = Counter(labels)
    found = []
    largest, smallest = max(counts.values()), min(counts.values())
    ratio = largest / smallest
    if len(counts) > 1 and ratio >= IMBALANCE_INFO:
        severity = "warning" if ratio >= IMBALANCE_WARNING else "info"
        shares = ", ".join(f"{k} {v / len(labels):.1%}" for k, v in counts.most_common())
        found.append(finding(
            "imbalance", severity, len(counts), [{"classes": dict(counts.most_common())}],
            "scores are macro-averaged (each class counts alike) and the loss weights classes by their "
            f"inverse frequency; add {unit} of the small classes if you can",
            f"the largest class has {ratio:.1f}x the {unit} of the smallest ({shares})"))
    rare = {k: v for k, v in counts.items() if v < RARE_ROWS}
    if rare:
        severity = "error" if min(rare.values()) < 2 else "warning"
        found.append(finding(
            "rare-class", severity, len(rare), [{"class": k, unit: v} for k, v in sorted(rare.items())],
            f"add {unit} (at least {RARE_ROWS} per class; 2 are the least that can be split into training and "
            f"test), merge the class into another, or remove its {unit}",
            f"{len(rare)} classes have fewer than {RARE_ROWS} {unit}: "
            + ", ".join(f"{k!r} ({v})" for k, v in sorted(rare.items()))))
    return found


def _truncated(texts: Sequence[str], rows: Sequence[int | str], token_lengths: Sequence[int],
               max_length: int, suggested: int | None) -> Finding | None:
    over = [i for i, n in enumerate(token_lengths) if n > max_length]
    if not over:
        return None
    share = len(over) / len(token_lengths)
    over.sort(key=lambda i: -token_lengths[i])
    return finding(
        "truncated", "warning" if share >= TRUNCATED_WARNING else "info", len(over),
        [example(rows[i], texts[i], tokens=int(token_lengths[i])) for i in over],
        f"the model reads the first {max_length} tokens of each text"
        + (" (the 95th percentile of these texts, rounded up to 8: fit's default)" if suggested == max_length else "")
        + "; torchwork fit --set transformer_max_length=N reads more (slower; up to the model's limit"
        + (f"; the 95th percentile of these texts is {suggested}" if suggested and suggested != max_length else "")
        + "), or put what matters first",
        f"{share:.1%} of texts are longer than max_length={max_length} tokens (the longest: "
        f"{max(token_lengths):,})", [rows[i] for i in over])


def _label_noise(texts: Sequence[str], labels: Sequence[str], rows: Sequence[int | str], seed: int) -> Finding | None:
    from torchwork.data.label_noise import label_noise_scan

    candidates, agreement = label_noise_scan(texts, labels, seed=seed)
    if not candidates or agreement is None:  # None: a class of one row cannot be cross-validated (rare-class)
        return None
    return finding(
        "label-noise", "info", len(candidates),
        [example(rows[c.index], texts[c.index], given=c.given, suggested=c.suggested,
                 confidence=round(c.confidence, 3),
                 note=f"labelled {c.given}, the baseline says {c.suggested} ({c.confidence:.0%})")
         for c in candidates],
        "read the listed rows (most suspicious first; every one under \"rows\" in the JSON report) and correct the "
        "labels that are wrong; the model learns from whatever the labels say. The first rows are the likeliest "
        "mistakes; further down, more are texts the baseline misreads, the more so the less it agrees with the "
        "labels",
        f"{len(candidates):,} rows ({len(candidates) / len(texts):.1%}) look mislabelled to a cross-validated "
        f"TF-IDF baseline (it agrees with {agreement:.0%} of the labels)", [rows[c.index] for c in candidates])


def _check_settings(count: int, per_row: Mapping[str, Sequence[object] | None], max_length: int | None,
                    suggested_length: int | None, label_noise: bool, seed: int) -> tuple[int | None, int | None]:
    """``(max_length, suggested_length)`` as ints or None; a ConfigError before any text is read for a
    sequence (``per_row``: labels, rows, splits, token lengths) that has not one entry per text, a length
    that is no token count, a ``label_noise`` that is no bool, a seed outside [0, 2**32)."""
    if count == 0:
        raise ConfigError("texts is empty: pass at least one text (and its label) to audit.")
    for name, values in per_row.items():
        if values is not None and len(values) != count:
            raise ConfigError(f"{name} has {len(values):,} entries for {count:,} texts: pass one per text, in "
                              "the same order" + (", or None" if name != "labels" else "") + ".")
    if not isinstance(label_noise, bool):
        raise ConfigError(f"label_noise={quote_value(label_noise)} must be True or False.")
    check_seed(seed)
    return check_max_length(max_length), check_max_length(suggested_length, "suggested_length")


def audit_texts(texts: Sequence[str], labels: Sequence[str], *, rows: Sequence[int | str] | None = None,
                splits: Sequence[str] | None = None, token_lengths: Sequence[int] | None = None,
                max_length: int | None = None, suggested_length: int | None = None, label_noise: bool = True,
                seed: int = 0) -> DataReport:
    """The data report of ``texts`` labelled ``labels`` (see the module for the kinds).

    ``rows``: the row number of each text in its file (default 1, 2, ...); ``splits``: the split each row
    was given (``train``/``validation``/``test``), when the user gave them; ``token_lengths`` and
    ``max_length``: the model's token count of each text and the length it reads (``suggested_length``: a
    better one, named in the fix).
    """
    per_row = {"labels": labels, "rows": rows, "splits": splits, "token_lengths": token_lengths}
    max_length, suggested_length = _check_settings(len(texts), per_row, max_length, suggested_length, label_noise,
                                                   seed)
    rows = list(rows) if rows is not None else list(range(1, len(texts) + 1))
    groups = _groups([match_key(text) for text in texts])
    found: list[Finding | None] = [
        _duplicates(texts, rows, groups),
        _cross_split(texts, rows, splits, groups) if splits is not None else None,
        _conflicts(texts, labels, rows, groups),
        _label_variants(texts, labels, rows),
        _empty(texts, rows),
        _garbled(texts, rows),
        *class_findings(labels),
        (_truncated(texts, rows, token_lengths, max_length, suggested_length)
         if token_lengths is not None and max_length else None),
        _label_noise(texts, labels, rows, seed) if label_noise else None,
    ]
    return DataReport([f for f in found if f is not None])
