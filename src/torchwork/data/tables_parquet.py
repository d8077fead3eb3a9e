"""Reading a Parquet file of labelled texts without letting a small file exhaust memory: the table's size as
text is checked from the metadata, then exactly, before anything is expanded (:func:`read_parquet`, used by
:func:`torchwork.data.tables.read_text_table`).

Example:
    >>> import io, pathlib, tempfile
    >>> import pyarrow as pa, pyarrow.parquet as pq
    >>> sink = io.BytesIO(); pq.write_table(pa.table({"text": ["good", "bad"], "label": [1, 0]}), sink)
    >>> columns, nested, flat, df = read_parquet(pathlib.Path("r.parquet"), sink.getvalue(), 2**20, lambda p, c: None)
    >>> columns, sorted(nested), df["text"].tolist()
    (['text', 'label'], [], ['good', 'bad'])
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchwork.errors import DataError

# A Parquet file's decoded table, counted as the text it would be as a CSV (its values, one delimiter or line end
# per cell), may be at most this many times the file's size, or PARQUET_SMALL_TABLE whatever its size (and never
# over max_bytes): a CSV of max_bytes cannot decode to more than its own size, a Parquet file of kilobytes can
# hold millions of rows of repeated values, and pandas then spends tens of bytes on each cell.
PARQUET_MAX_EXPANSION = 64
PARQUET_SMALL_TABLE = 8 * 2**20


def read_parquet(path: Path, data: bytes, max_bytes: int, require_unique: Callable[[Path, list[str]], None]
                 ) -> tuple[list[str], set[str], list[str], Any]:
    """``(columns, nested columns, flat columns as stored, the flat columns as a pandas DataFrame)`` of the
    Parquet file ``data``, decoded only once its size as text is known to be within bounds: from the metadata
    first (rows and uncompressed sizes), then exactly, with string columns read as dictionaries (a value
    repeated on a million rows is held once) and expanded after the check. ``require_unique`` refuses
    repeated column names (the reader's own check, as for a CSV)."""
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
        require_unique(path, columns)
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
    return columns, nested, flat, table.to_pandas()


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
