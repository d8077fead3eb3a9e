"""Read a user's labelled text file (CSV, TSV, JSON Lines, Parquet) the way users have them.

:func:`read_text_table` finds the format, encoding and delimiter, reads the file with pandas (pyarrow for
Parquet), guesses the text, label and split columns that were not named, and returns a :class:`TextTable`
of plain lists; :func:`describe_table` gives the lines ``torchwork fit`` prints so the user can confirm the
guesses or override them. Everything that cannot work is a :class:`~torchwork.errors.DataError` naming the
file, the row where there is one, and what to do.

Example:
    >>> import pathlib, tempfile
    >>> from torchwork.data import describe_table, read_text_table
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "reviews.csv"
    >>> _ = path.write_text("review;stars\\n\\"Great, really\\";5\\nDull;1\\nFine;3\\nAwful;1\\n")
    >>> table = read_text_table(path)
    >>> table.texts, table.labels, table.label_kind
    (['Great, really', 'Dull', 'Fine', 'Awful'], ['5', '1', '3', '1'], 'integer')
    >>> print("\\n".join(describe_table(table)))
    read reviews.csv: 4 rows, CSV (';' delimited, UTF-8)
    text column: 'review' (guessed; --text COL to choose another)
    label column: 'stars' (guessed, 3 classes, integer; --label COL to choose another)
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import os
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchwork.data import tables_detect as detect
from torchwork.data.tables_parquet import (  # noqa: F401 (the bounds: their old import path)
    PARQUET_MAX_EXPANSION,
    PARQUET_SMALL_TABLE,
    read_parquet,
)
from torchwork.errors import ConfigError, DataError
from torchwork.finite import check_count
from torchwork.quoting import quote_value

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LABEL_NAMES = ("label", "labels", "class", "category", "sentiment", "target", "y", "stars", "rating")
SPLIT_NAMES = ("split", "set", "fold", "subset")
SPLIT_VALUES = {"train": "train", "training": "train", "val": "validation", "valid": "validation",
                "validation": "validation", "dev": "validation", "test": "test", "testing": "test"}
MISSING_LABELS = frozenset({"", "nan", "NaN", "NA", "N/A", "n/a", "null", "NULL"})
MAX_CLASSES = 100
MAX_FIELD_CHARS = 1_000_000  # read_text_table's default, the bound of torchwork fit and data check
_INTEGER = r"[+-]?\d+"
_FLOAT = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_ENCODING_NAMES = {"utf-8": "UTF-8", "utf-8-sig": "UTF-8 with BOM", "utf-16": "UTF-16",
                   "cp1252": "Windows-1252", "latin-1": "Latin-1"}


@dataclasses.dataclass(frozen=True)
class TextTable:
    """A labelled text file as plain lists, one entry per data row, and how it was read."""

    path: Path
    format: str                  # "csv" | "tsv" | "jsonl" | "parquet"
    encoding: str | None         # "utf-8", "utf-8-sig", "utf-16", "cp1252", "latin-1"; None for parquet
    delimiter: str | None        # for csv/tsv
    columns: tuple[str, ...]     # every column, header whitespace stripped
    text_column: str
    label_column: str
    split_column: str | None     # a column named split/set/fold/subset holding train/validation/test
    guessed: tuple[str, ...]     # which of "text", "label", "split" were guessed rather than given
    texts: list[str]             # one per row; a missing text is ""
    labels: list[str]            # class names: "3" for 3 or 3.0, "0.5" for 0.5, "positive", stripped
    label_kind: str              # "string" | "integer" | "float"
    splits: list[str] | None     # per row "train" | "validation" | "test"; None without a split column
    rows: list[int]              # the 1-based data-row number of each entry (the first row after a header is 1)
    undecodable_rows: list[int]  # rows that had bytes invalid in the encoding (replaced by U+FFFD)
    fingerprint: str             # "sha256:<hex>" of the file's bytes
    notes: tuple[str, ...] = ()  # warnings about how the file was read, printed by describe_table


@dataclasses.dataclass
class _Frame:
    """The parsed file: every flat column as a pandas ``str`` Series (missing = NA), and the nested ones."""

    columns: list[str]
    values: dict[str, pd.Series]
    nested: dict[str, list[int]]  # a column holding lists or dicts: the 1-based rows that do
    encoding: str | None
    delimiter: str | None
    format: str
    undecodable: list[int]

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.values.values()))) if self.values else 0


def read_text_table(path: str | os.PathLike[str], *, text: str | None = None, label: str | None = None,
                    max_bytes: int = 4 * 2**30, max_field_chars: int = MAX_FIELD_CHARS) -> TextTable:
    """Read a labelled text file: one text and one label per row, plus a train/validation/test split
    column if it has one.

    ``text`` and ``label`` name the columns; each one left None is guessed: the label is the first column
    named label, labels, class, category, sentiment, target, y, stars or rating (any case) with at most 100
    distinct values, else the column with the fewest distinct values (2 to 100, at most half the rows); the
    text is the string column with the longest median length that is neither the label nor the split.
    Labels become class names (strings). A file over ``max_bytes`` or a field over ``max_field_chars``
    characters is refused before it can exhaust memory, and so is a Parquet file whose table decodes to more
    than ``max_bytes`` of text, or to more than :data:`PARQUET_MAX_EXPANSION` times the file's size (past
    :data:`PARQUET_SMALL_TABLE`): the row count and uncompressed sizes of its metadata are checked before
    anything is decoded.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "tickets.jsonl"
        >>> _ = path.write_text('{"body": "printer on fire", "team": "it", "set": "train"}\\n'
        ...                     '{"body": "payslip missing", "team": "hr", "set": "test"}\\n')
        >>> table = read_text_table(path, label="team")
        >>> table.texts, table.labels, table.splits, table.guessed
        (['printer on fire', 'payslip missing'], ['it', 'hr'], ['train', 'test'], ('text', 'split'))
    """
    max_bytes = check_count(max_bytes, "max_bytes", 1, detect.MAX_READ_BYTES,
                            " (the largest file read, in bytes; 2**40: the file is held in memory)")
    # A field lies within the file, so the file's bound is the field's too.
    max_field_chars = check_count(max_field_chars, "max_field_chars", 1, detect.MAX_READ_BYTES,
                                  " (the longest field, in characters; 2**40 at most)")
    for role, name in (("text", text), ("label", label)):
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"{role}={quote_value(name)}: name the {role} column as a non-empty string "
                              f"(--{role} COL), or leave it out (None) to have it guessed.")
    path = Path(path)
    kind = detect.file_format(path)
    data = detect.read_regular_file(path, max_bytes)
    if not data.strip():
        raise DataError(f"{path} is empty. Give a file with a header row and one row per text.")
    frame = _parse(path, kind, data, max_field_chars, max_bytes)
    if frame.n_rows == 0:
        raise DataError(f"{path} has a header ({', '.join(frame.columns)}) but no data rows. Add one row per "
                        "text, or check you gave the right file.")
    _check_field_lengths(path, frame, max_field_chars)
    text_column, label_column, split_column, guessed = _guess_columns(path, frame, text, label)
    notes = _check_swallowed_rows(path, frame, label_column) + _check_header(path, frame, text_column, label_column)
    labels, label_kind = _labels(path, label_column, frame.values[label_column])
    splits = None
    if split_column is not None:
        splits = [SPLIT_VALUES[v.strip().lower()] for v in frame.values[split_column].tolist()]
    return TextTable(
        path=path, format=frame.format, encoding=frame.encoding, delimiter=frame.delimiter,
        columns=tuple(frame.columns), text_column=text_column, label_column=label_column,
        split_column=split_column, guessed=guessed,
        texts=frame.values[text_column].fillna("").tolist(), labels=labels, label_kind=label_kind,
        splits=splits, rows=list(range(1, frame.n_rows + 1)), undecodable_rows=frame.undecodable,
        fingerprint="sha256:" + hashlib.sha256(data).hexdigest(), notes=notes)


def _parse(path: Path, kind: str, data: bytes, max_field_chars: int, max_bytes: int) -> _Frame:
    if kind == "parquet":
        return _parse_parquet(path, data, max_bytes)
    expected = {"jsonl": "a JSON Lines file", "tsv": "a TSV file", "txt": "a delimited text file"}.get(
        kind, "a CSV file")
    detect.check_not_binary(data, path, expected)
    decoded = detect.decode(data, path)
    if kind == "jsonl":
        frame = _parse_jsonl(path, decoded)
    else:
        frame = _parse_delimited(path, kind, decoded, max_field_chars)
    if decoded.sentinel is not None:
        bad = None
        for series in frame.values.values():
            hit = series.str.contains(decoded.sentinel, regex=False).fillna(False).to_numpy(dtype=bool)
            bad = hit if bad is None else bad | hit
            if decoded.sentinel != "\ufffd":
                series.update(series.str.replace(decoded.sentinel, "\ufffd", regex=False))
        frame.undecodable = [int(i) + 1 for i in bad.nonzero()[0]] if bad is not None else []
    return frame


def _parse_delimited(path: Path, kind: str, decoded: detect.Decoded, max_field_chars: int) -> _Frame:
    import pandas as pd

    sample = decoded.sample()
    delimiter = detect.detect_delimiter(sample, path, prefer="," if kind == "csv" else "\t")
    line = detect.find_overlong_run(decoded.utf8, delimiter, max_field_chars)
    if line is not None:
        raise _too_long(path, f"line {line:,} of the file", max_field_chars)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            df = pd.read_csv(io.BytesIO(decoded.utf8), sep=delimiter, dtype=str, na_filter=False,
                             index_col=False, encoding="utf-8", engine="c")
        except pd.errors.ParserError as error:
            raise _parser_error(path, str(error)) from None
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        raise DataError(f"{path}: the data rows have more fields than the header "
                        f"({len(df.columns)} names). Quote fields that contain {_shown(delimiter)}, or add "
                        "the missing names to the header.")
    names = [n.strip() for n in detect.header_names(sample, delimiter)]
    columns = [n or str(c) for n, c in zip(names, df.columns)] if len(names) == len(df.columns) \
        else [str(c).strip() for c in df.columns]
    _require_unique(path, columns)
    values = {name: df[column] for name, column in zip(columns, df.columns)}
    return _Frame(columns, values, {}, decoded.encoding, delimiter,
                  "tsv" if delimiter == "\t" else "csv", [])


def _parser_error(path: Path, message: str) -> DataError:
    unclosed = re.search(r"EOF inside string starting at row (\d+)", message)
    if unclosed is not None:
        return DataError(f"{path}: the quoted field that starts in row {int(unclosed.group(1)):,} never closes, "
                         "so it swallows the rest of the file. Close that quote (or double a quote inside it).")
    found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", message)
    if found is None:
        return DataError(f"{path} could not be parsed ({message.strip()}). Check its quoting: every quote "
                         "that opens a field must close it.")
    expected, line, saw = (int(g) for g in found.groups())
    return DataError(f"{path}: row {line - 1:,} has {saw} fields where the header has {expected}. Quote the "
                     "fields that contain the delimiter, or fix that row.")


def _parse_jsonl(path: Path, decoded: detect.Decoded) -> _Frame:
    import pandas as pd

    try:
        df = pd.read_json(io.BytesIO(decoded.utf8), lines=True, dtype=False, encoding="utf-8")
    except ValueError as error:
        raise _json_error(path, decoded.utf8, error) from None
    if not all(isinstance(c, str) for c in df.columns):
        raise DataError(f"{path}: each line must be a JSON object such as {{\"text\": ..., \"label\": ...}}, "
                        "not an array or a bare value.")
    columns = [c.strip() for c in df.columns]
    _require_unique(path, columns)
    values, nested = _flat_values(df, columns)
    return _Frame(columns, values, nested, decoded.encoding, None, "jsonl", [])


def _json_error(path: Path, utf8: bytes, error: ValueError) -> DataError:
    for number, line in enumerate(utf8.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as bad:
            reason = bad.msg if isinstance(bad, json.JSONDecodeError) else str(bad)
            return DataError(f"{path}: line {number:,} is not valid JSON ({reason}). Fix or remove that "
                             "line; JSON Lines has one complete object per line.")
        if not isinstance(value, dict):
            return DataError(f"{path}: line {number:,} is a JSON {type(value).__name__}, not an object. "
                             "Write one object per line, such as {\"text\": ..., \"label\": ...}.")
    return DataError(f"{path} could not be read as JSON Lines ({error}). Write one JSON object per line.")


def _parse_parquet(path: Path, data: bytes, max_bytes: int) -> _Frame:
    """The flat columns of a Parquet file (:func:`torchwork.data.tables_parquet.read_parquet`)."""
    columns, nested, flat, df = read_parquet(path, data, max_bytes, _require_unique)
    values, _ = _flat_values(df, [name.strip() for name in flat])
    return _Frame(columns, values, {name: [] for name in nested}, None, None, "parquet", [])


def _flat_values(df: pd.DataFrame, columns: list[str]) -> tuple[dict[str, pd.Series], dict[str, list[int]]]:
    """Each column as strings (missing = NA); columns holding lists or dicts are set apart as nested, with the
    1-based rows that hold them (named in the messages)."""
    import pandas as pd

    values: dict[str, pd.Series] = {}
    nested: dict[str, list[int]] = {}
    for name, column in zip(columns, df.columns):
        series = df[column]
        if isinstance(series.dtype, pd.StringDtype):
            values[name] = series
            continue
        items = series.astype(object).tolist()
        rows = [i + 1 for i, v in enumerate(items) if isinstance(v, (list, dict, tuple)) or hasattr(v, "__array__")]
        if rows:
            nested[name] = rows
            continue
        values[name] = pd.Series([None if _is_missing(v) else _scalar(v) for v in items], dtype="str")
    return values, nested


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or str(value) in ("NaT", "<NA>")


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _require_unique(path: Path, columns: list[str]) -> None:
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise DataError(f"{path}: the header names {', '.join(map(repr, twice))} more than once (after "
                        "stripping spaces). Rename the columns so that each name is unique.")


def _check_field_lengths(path: Path, frame: _Frame, limit: int) -> None:
    for name, series in frame.values.items():
        lengths = series.str.len().fillna(0).to_numpy()
        if len(lengths) and lengths.max() > limit:
            row = int(lengths.argmax()) + 1
            raise _too_long(path, f"row {row:,}, column {name!r},", limit)


def _check_swallowed_rows(path: Path, frame: _Frame, label_column: str) -> tuple[str, ...]:
    """Refuse a quoted field whose lines look like rows: a stray quote that opened a field the next quote in
    the file closed, folding the rows between into one text.

    A line looks like a row when it holds the delimiter and ends with a class of the label column. A field
    is refused when two or more of its lines do, and at least half; one such line (a swallowed row, or a line
    ending ", no" in a yes/no file: a refusal would have no way round it) is a warning note."""
    if frame.delimiter is None:
        return ()
    delimiter, notes = frame.delimiter, list[str]()
    classes = set(frame.values[label_column].dropna().str.strip()) - MISSING_LABELS
    for name, series in frame.values.items():
        multi_line = series.str.contains("\n", regex=False).fillna(False).to_numpy(dtype=bool)
        for index in multi_line.nonzero()[0]:
            lines = str(series.iloc[index]).split("\n")
            ends = [_row_end(line, delimiter, classes) for line in lines]
            row_like = [end for end in ends if end is not None]
            if len(row_like) >= 2 and 2 * len(row_like) >= len(lines):
                raise _swallowed(path, name, int(index) + 1, len(lines), row_like, delimiter)
            if row_like and 2 * len(row_like) >= len(lines) and len(notes) < 5:
                swallowed = _swallowed(path, name, int(index) + 1, len(lines), row_like, delimiter)
                notes.append(f"warning: {swallowed} If that text is right as it is, nothing needs doing.")
    return tuple(notes)


def _row_end(line: str, delimiter: str, classes: set[str]) -> str | None:
    """The class a line ends with after the delimiter, when it looks like a row of the file; else None."""
    if delimiter not in line:
        return None
    end = line.rsplit(delimiter, 1)[1].strip()
    return end if end in classes else None


def _swallowed(path: Path, column: str, row: int, lines: int, ends: list[str], delimiter: str) -> DataError:
    shown = ", ".join(map(repr, sorted(set(ends))[:3]))
    held = "a tab" if delimiter == "\t" else repr(delimiter)
    return DataError(
        f"{path}: the quoted field that opens in row {row:,} (column {column!r}) closes only in row "
        f"{row + lines - 1:,}: it swallowed {len(ends):,} line(s) that look like rows (they hold {held} and end "
        f"with a label, {shown}), read as one text. Escape the quote in row {row:,} (double it) or remove it, "
        "or save the file with proper quoting (a field that holds a quote quoted).")


def _check_header(path: Path, frame: _Frame, text_column: str, label_column: str) -> tuple[str, ...]:
    """Refuse a delimited file whose header is a data row: the label column named after one of its own
    classes and the text column after a sentence. One of the two alone is a note (a column named "spam"
    holding spam and ham, or a survey's question as a header, are real headers)."""
    if frame.delimiter is None:
        return ()
    values = set(frame.values[label_column].dropna().str.strip())
    label_is_value = label_column in values
    text_is_sentence = len(text_column.split()) >= 5
    if not (label_is_value or text_is_sentence):
        return ()
    reasons = ([f"the label column's name {label_column!r} is one of its own classes"] if label_is_value else []) \
        + ([f"the text column's name {_clipped(text_column)!r} is a sentence"] if text_is_sentence else [])
    header = ("<tab>" if frame.delimiter == "\t" else frame.delimiter).join("text" if c == text_column else "label" if c == label_column else f"column{i}"
                                  for i, c in enumerate(frame.columns, start=1))
    fix = f"add a header row ({header}) as the file's first line"
    if label_is_value and text_is_sentence:
        raise DataError(f"{path}: the header looks like a data row ({' and '.join(reasons)}): a file without a "
                        f"header loses its first row. If it has none, {fix}.")
    return (f"warning: the header may be a data row ({reasons[0]}); if the file has no header, {fix}",)


def _clipped(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _too_long(path: Path, where: str, limit: int) -> DataError:
    # torchwork fit and data check have no setting for the limit: a real text this long is shortened, or the
    # file read from Python.
    return DataError(f"{path}: {where} has a field longer than {limit:,} characters (max_field_chars). A "
                     "text that long is usually a broken quote that swallowed the rows after it: check that "
                     "row's quotes. A text really that long: shorten it (torchwork fit and data check read "
                     f"fields of up to {MAX_FIELD_CHARS:,} characters), or read the file in Python with a larger "
                     "read_text_table(..., max_field_chars=N).")


def _kind(present: pd.Series) -> str:
    """``integer``, ``float`` or ``string``: what every (stripped, non-missing) value of a column parses as."""
    if present.str.fullmatch(_INTEGER).all():
        return "integer"
    return "float" if present.str.fullmatch(_FLOAT).all() else "string"


@dataclasses.dataclass(frozen=True)
class _Stats:
    kind: str              # "integer" | "float" | "string" | "empty"
    distinct: int          # distinct non-missing values
    median_length: float   # characters, missing values counting 0


def _stats(series: pd.Series) -> _Stats:
    present = series.dropna().str.strip()
    present = present[~present.isin(MISSING_LABELS)]
    if present.empty:
        return _Stats("empty", 0, 0.0)
    return _Stats(_kind(present), int(present.nunique()), float(series.fillna("").str.len().median()))


def _guess_columns(path: Path, frame: _Frame, text: str | None, label: str | None,
                   ) -> tuple[str, str, str | None, tuple[str, ...]]:
    """The text, label and split columns, and which of them were guessed.

    Label: the first column named like :data:`LABEL_NAMES` (in that order) with at most 100 distinct values,
    else the column with the fewest distinct values (2 to 100, at most half the rows) that is neither the
    text nor a split column. Text: the string column with the longest median length that is neither the
    label nor the split column. Split: a column named like :data:`SPLIT_NAMES` whose every value is a split.
    """
    text_column = _resolve(path, frame, text, "text") if text is not None else None
    label_column = _resolve(path, frame, label, "label") if label is not None else None
    if text_column is not None and text_column == label_column:
        raise ConfigError(f"the text and the label column are both {text_column!r}; name two different "
                          f"columns of {path.name}.")
    stats = {name: _stats(series) for name, series in frame.values.items()}
    split_column = _find_split(frame, {text_column, label_column})
    if label_column is None:
        provisional = text_column or _guess_text(path, frame, stats, {split_column})
        label_column = _guess_label(frame, stats, {text_column, split_column}, provisional)
        if label_column is None:
            nested = " or flatten the lists and objects of a nested column (one class per row)" if frame.nested \
                else ""
            raise DataError(f"{path}: no column looks like labels (a column named label, class, category, ... "
                            f"or one with 2 to {MAX_CLASSES} distinct values); its columns are "
                            f"{_listed(frame, stats)}. Choose one with --label COL (label= in Python){nested}.")
    if text_column is None:
        text_column = _guess_text(path, frame, stats, {label_column, split_column})
    guessed = (("text",) if text is None else ()) + (("label",) if label is None else ()) + \
        (("split",) if split_column is not None else ())
    return text_column, label_column, split_column, guessed


def _resolve(path: Path, frame: _Frame, name: str, role: str) -> str:
    wanted = name.strip()
    matches = [c for c in frame.columns if c == wanted] or \
        [c for c in frame.columns if c.lower() == wanted.lower()]
    if len(matches) > 1:
        raise DataError(f"{path} has {len(matches)} columns named {name!r} but for case "
                        f"({', '.join(map(repr, matches))}); give one of them exactly, case included, with "
                        f"--{role} COL ({role}= in Python).")
    if not matches:
        raise DataError(f"{path} has no column {name!r}; its columns are {', '.join(map(repr, frame.columns))}. "
                        f"Choose one of them with --{role} COL ({role}= in Python).")
    if matches[0] in frame.nested:
        raise DataError(f"{path}: column {matches[0]!r} holds nested values (lists or structs) "
                        f"{_nested_rows(frame, matches[0])}, and the {role} must be one string or number per row. "
                        "Flatten it first: join a list into one string, or pick one field of the struct into its "
                        "own column.")
    return matches[0]


def _find_split(frame: _Frame, taken: set[str | None]) -> str | None:
    for name, series in frame.values.items():
        if name.lower() in SPLIT_NAMES and name not in taken and not series.isna().any():
            if series.str.strip().str.lower().isin(SPLIT_VALUES.keys()).all():
                return name
    return None


def _guess_label(frame: _Frame, stats: dict[str, _Stats], taken: set[str | None], text: str) -> str | None:
    """A column named like a label, else the one with the fewest distinct values; the likeliest text column
    (``text``) only when no other column qualifies."""
    candidates = [c for c in frame.values if c not in taken]
    for wanted in LABEL_NAMES:
        for name in candidates:
            if name.lower() == wanted and 1 <= stats[name].distinct <= MAX_CLASSES:
                return name
    fallback = [c for c in candidates if c.lower() not in SPLIT_NAMES
                and 2 <= stats[c].distinct <= min(MAX_CLASSES, frame.n_rows // 2)]
    return min(fallback, key=lambda c: (c == text, stats[c].distinct)) if fallback else None  # first on a tie


def _guess_text(path: Path, frame: _Frame, stats: dict[str, _Stats], taken: set[str | None]) -> str:
    strings = [c for c in frame.values if c not in taken and stats[c].kind == "string"]
    if not strings:
        raise DataError(f"{path} has no column of text: its columns are {_listed(frame, stats)}. A labelled "
                        "text file needs a column of strings; choose it with --text COL if it is there.")
    return max(strings, key=lambda c: stats[c].median_length)  # the first one on a tie


def _nested_rows(frame: _Frame, name: str) -> str:
    """Where column ``name`` holds lists or structs: "in every row", or "in 2 rows (17, 503)"."""
    rows = frame.nested[name]
    if not rows or len(rows) == frame.n_rows:
        return "in every row"
    return f"in {len(rows):,} row(s) ({_first_rows(rows)})"


def _first_rows(rows: list[int]) -> str:
    return ", ".join(f"{r:,}" for r in rows[:5]) + (", ..." if len(rows) > 5 else "")


def _listed(frame: _Frame, stats: dict[str, _Stats]) -> str:
    return ", ".join(f"{c!r} ({stats[c].kind if c in stats else 'nested ' + _nested_rows(frame, c)})"
                     for c in frame.columns)


def _labels(path: Path, name: str, series: pd.Series) -> tuple[list[str], str]:
    """Class names for each row, and whether they were strings, integers or floats."""
    stripped = series.str.strip()
    _check_missing_labels(path, name, stripped)
    values = stripped.tolist()
    kind = _kind(stripped)
    _check_free_text(path, name, values, kind)
    if kind == "integer":
        return [str(int(v)) for v in values], kind
    if kind == "string":
        return values, kind
    numbers = [float(v) for v in values]
    distinct = len(set(numbers))
    if distinct > MAX_CLASSES:
        raise DataError(f"{path}: the label column {name!r} holds {distinct:,} distinct numbers, like "
                        f"{', '.join(values[:3])}; it looks like a regression target, and classification "
                        "needs classes. Choose a column of classes with --label COL, or bin the values.")
    return [str(int(x)) if x.is_integer() else repr(x) for x in numbers], kind


def _check_missing_labels(path: Path, name: str, stripped: pd.Series) -> None:
    """Refuse rows without a label, naming the value read as missing ("N/A", "null", ...) when it was one."""
    markers = stripped.isin(MISSING_LABELS) & (stripped != "")
    missing = (stripped.isna() | stripped.isin(MISSING_LABELS)).to_numpy().nonzero()[0]
    if not len(missing):
        return
    named = sorted(set(stripped[markers].tolist()))
    reason = rename = ""
    if named:
        empty = ["empty"] if len(missing) > int(markers.sum()) else []
        reason = (f": {', or '.join(empty + [repr(v) for v in named])}, "
                  f"{'which is' if len(named) == 1 else 'which are'} read as missing")
        rename = f"; a class named {named[0]!r} needs another name, such as 'none'"
    raise DataError(f"{path}: {len(missing):,} row(s) have no label in column {name!r} (rows "
                    f"{_first_rows([int(i) + 1 for i in missing])}){reason}. Drop those rows or label them"
                    f"{rename}.")


def _check_free_text(path: Path, name: str, values: list[str], kind: str) -> None:
    """Refuse a label column most of whose rows are a class of their own: free text (or ids), not labels."""
    counts = collections.Counter(values)
    alone = sum(1 for n in counts.values() if n == 1)
    if kind == "float" or alone < 10 or 2 * alone <= len(values):
        return
    looks = "identifiers" if kind == "integer" else "free text"
    example = _clipped(next(v for v in values if counts[v] == 1), 40)
    raise DataError(f"{path}: the label column {name!r} looks like {looks}, not labels: {alone:,} of its "
                    f"{len(values):,} rows hold a value no other row has (such as {example!r}). Choose the "
                    "column of classes with --label COL (label= in Python).")


def describe_table(table: TextTable) -> list[str]:
    """The lines ``torchwork fit`` prints about a file it read, so the user can confirm or override guesses.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.tsv"
        >>> _ = path.write_bytes("id\\tnote\\tgrade\\n1\\tfine café\\t0.5\\n2\\tpoor\\t1.0\\n".encode("cp1252"))
        >>> for line in describe_table(read_text_table(path, label="grade")):
        ...     print(line)
        read notes.tsv: 2 rows, TSV (Windows-1252)
        text column: 'note' (guessed; --text COL to choose another)
        label column: 'grade' (2 classes, float)
        other columns, not used: 'id'
    """
    name = {"csv": "CSV", "tsv": "TSV", "jsonl": "JSON Lines", "parquet": "Parquet"}[table.format]
    details = [f"{_shown(table.delimiter)} delimited"] if table.delimiter and table.format == "csv" else []
    encoding = _ENCODING_NAMES.get(table.encoding or "", table.encoding)
    details += [encoding] if encoding else []
    lines = [f"read {table.path.name}: {len(table.texts):,} rows, {name}"
             + (f" ({', '.join(details)})" if details else "")]
    text_note = " (guessed; --text COL to choose another)" if "text" in table.guessed else ""
    lines.append(f"text column: {table.text_column!r}{text_note}")
    classes = len(set(table.labels))
    about = f"{classes:,} class{'es' if classes != 1 else ''}, {table.label_kind}"
    if "label" in table.guessed:
        about = f"guessed, {about}; --label COL to choose another"
    lines.append(f"label column: {table.label_column!r} ({about})")
    if table.split_column is not None and table.splits is not None:
        counts = ", ".join(f"{s} {table.splits.count(s):,}" for s in ("train", "validation", "test"))
        lines.append(f"split column: {table.split_column!r} (guessed: {counts})")
    unused = [c for c in table.columns if c not in (table.text_column, table.label_column, table.split_column)]
    if unused:
        lines.append(f"other columns, not used: {', '.join(map(repr, unused))}")
    if table.undecodable_rows:
        bad = table.undecodable_rows
        shown = ", ".join(f"{r:,}" for r in bad[:5]) + (", ..." if len(bad) > 5 else "")
        lines.append(f"{len(bad):,} row(s) had bytes that are not valid {encoding}, shown as U+FFFD "
                     f"(rows {shown})")
    return lines + list(table.notes)


def _shown(delimiter: str | None) -> str:
    return "tab" if delimiter == "\t" else repr(delimiter)
