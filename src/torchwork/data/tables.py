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
_INTEGER = r"[+-]?\d+"
_FLOAT = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
# A Parquet file's decoded table, counted as the text it would be as a CSV (its values, one delimiter or line end
# per cell), may be at most this many times the file's size, or PARQUET_SMALL_TABLE whatever its size (and never
# over max_bytes): a CSV of max_bytes cannot decode to more than its own size, a Parquet file of kilobytes can
# hold millions of rows of repeated values, and pandas then spends tens of bytes on each cell.
PARQUET_MAX_EXPANSION = 64
PARQUET_SMALL_TABLE = 8 * 2**20
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


@dataclasses.dataclass
class _Frame:
    """The parsed file: every flat column as a pandas ``str`` Series (missing = NA), and the nested ones."""

    columns: list[str]
    values: dict[str, pd.Series]
    nested: set[str]
    encoding: str | None
    delimiter: str | None
    format: str
    undecodable: list[int]

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.values.values()))) if self.values else 0


def read_text_table(path: str | os.PathLike[str], *, text: str | None = None, label: str | None = None,
                    max_bytes: int = 4 * 2**30, max_field_chars: int = 1_000_000) -> TextTable:
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
        fingerprint="sha256:" + hashlib.sha256(data).hexdigest())


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
    return _Frame(columns, values, set(), decoded.encoding, delimiter,
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
    """The flat columns of a Parquet file, decoded only once its size as text is known to be within bounds:
    from the metadata first (rows and uncompressed sizes), then exactly, with string columns read as
    dictionaries (a value repeated on a million rows is held once) and expanded after the check."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not (data.startswith(b"PAR1") and data.endswith(b"PAR1")):
        raise DataError(f"{path} is not a Parquet file (no PAR1 signature at its start and end); it may be "
                        "truncated or another format under a .parquet name.")
    limit = min(max_bytes, max(PARQUET_MAX_EXPANSION * len(data), PARQUET_SMALL_TABLE))
    try:
        file = pq.ParquetFile(pa.BufferReader(data))
        schema, metadata = file.schema_arrow, file.metadata
        columns = [name.strip() for name in schema.names]
        _require_unique(path, columns)
        nested = {name for name, field in zip(columns, schema) if pa.types.is_nested(field.type)}
        flat = [field.name for name, field in zip(columns, schema) if name not in nested]
        _check_parquet_size(path, len(data), max_bytes, limit, metadata.num_rows, len(flat),
                            _uncompressed_bytes(metadata, set(flat)) + metadata.num_rows * len(flat), exact=False)
        strings = [field.name for field in schema if field.name in flat and _is_text(field.type)]
        table = pq.ParquetFile(pa.BufferReader(data), read_dictionary=strings).read(columns=flat)
        _check_parquet_size(path, len(data), max_bytes, limit, table.num_rows, len(flat),
                            _text_bytes(table) + table.num_rows * len(flat), exact=True)
        table = pa.table([_expanded(column) for column in table.columns], names=table.column_names)
    except (pa.ArrowException, OSError) as error:
        raise DataError(f"{path} could not be read as Parquet ({error}); it may be damaged.") from None
    df = table.to_pandas()
    values, _ = _flat_values(df, [name.strip() for name in flat])
    return _Frame(columns, values, nested, None, None, "parquet", [])


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind))


def _uncompressed_bytes(metadata: Any, names: set[str]) -> int:
    """What the metadata says the columns ``names`` take uncompressed: their values as stored (a dictionary
    once, with each row's index into it), before any of them is decoded."""
    leaves = [j for j in range(metadata.num_columns) if metadata.schema.column(j).path in names]
    return sum(metadata.row_group(i).column(j).total_uncompressed_size
               for i in range(metadata.num_row_groups) for j in leaves)


def _text_bytes(table: Any) -> int:
    """The bytes of ``table``'s values with its dictionary columns expanded, computed without expanding them:
    each row's value length, looked up in its dictionary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    for column in table.columns:
        for chunk in column.chunks:
            if pa.types.is_dictionary(chunk.type) and _is_text(chunk.type.value_type):
                lengths = pc.binary_length(chunk.dictionary)
                total += int(pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0)
            elif pa.types.is_dictionary(chunk.type):  # numbers or dates from a categorical: about 8 bytes each
                total += 8 * len(chunk)
            else:
                total += chunk.nbytes
    return total


def _expanded(column: Any) -> Any:
    import pyarrow as pa

    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _check_parquet_size(path: Path, size: int, max_bytes: int, limit: int, rows: int, columns: int, text: int,
                        exact: bool) -> None:
    """Refuse a Parquet file of ``size`` bytes whose ``rows`` x ``columns`` table is ``text`` bytes as text
    (``exact``, or as the metadata estimates it), over ``limit``."""
    if text <= limit:
        return
    decoded = f"{path}: its {rows:,} rows of {columns} columns decode to {'' if exact else 'about '}{text:,} bytes"
    if limit == max_bytes:
        raise DataError(f"{decoded} of text, over max_bytes ({max_bytes:,}). Use a sample of the file (fewer "
                        "rows), or raise max_bytes if this machine has the memory.")
    raise DataError(f"{decoded} of text, {text // size:,} times the file's {size:,} bytes; a Parquet file may "
                    f"decode to {PARQUET_MAX_EXPANSION} times its size (or to {PARQUET_SMALL_TABLE:,} bytes), so "
                    "that a small file cannot exhaust memory. Use a sample of the file (fewer rows), or save it "
                    "as CSV (read up to max_bytes).")


def _flat_values(df: pd.DataFrame, columns: list[str]) -> tuple[dict[str, pd.Series], set[str]]:
    """Each column as strings (missing = NA); columns holding lists or dicts are set apart as nested."""
    import pandas as pd

    values: dict[str, pd.Series] = {}
    nested: set[str] = set()
    for name, column in zip(columns, df.columns):
        series = df[column]
        if isinstance(series.dtype, pd.StringDtype):
            values[name] = series
            continue
        items = series.astype(object).tolist()
        if any(isinstance(v, (list, dict, tuple)) or hasattr(v, "__array__") for v in items):
            nested.add(name)
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


def _too_long(path: Path, where: str, limit: int) -> DataError:
    return DataError(f"{path}: {where} has a field longer than {limit:,} characters (max_field_chars). A "
                     "text that long is usually a broken quote that swallowed the rows after it: check that "
                     "row's quotes, or raise max_field_chars.")


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
            raise DataError(f"{path}: no column looks like labels (a column named label, class, category, ... "
                            f"or one with 2 to {MAX_CLASSES} distinct values); its columns are "
                            f"{_listed(frame, stats)}. Choose one with --label COL (label= in Python).")
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
        raise DataError(f"{path}: column {matches[0]!r} holds nested values (lists or structs), and the {role} "
                        "must be one string or number per row. Flatten it first: join a list into one string, "
                        "or pick one field of the struct into its own column.")
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


def _listed(frame: _Frame, stats: dict[str, _Stats]) -> str:
    return ", ".join(f"{c!r} ({stats[c].kind if c in stats else 'nested'})" for c in frame.columns)


def _labels(path: Path, name: str, series: pd.Series) -> tuple[list[str], str]:
    """Class names for each row, and whether they were strings, integers or floats."""
    stripped = series.str.strip()
    missing = (stripped.isna() | stripped.isin(MISSING_LABELS)).to_numpy().nonzero()[0]
    if len(missing):
        shown = ", ".join(f"{i + 1:,}" for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise DataError(f"{path}: {len(missing):,} row(s) have no label in column {name!r} (rows {shown}). "
                        "Drop those rows or label them.")
    values = stripped.tolist()
    kind = _kind(stripped)
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
    return lines


def _shown(delimiter: str | None) -> str:
    return "tab" if delimiter == "\t" else repr(delimiter)
