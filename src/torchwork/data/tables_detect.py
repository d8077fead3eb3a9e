"""The file-level half of :func:`torchwork.data.tables.read_text_table`: open, bound, sniff.

What a user's file is before any column is read: a regular file within a size limit (never a FIFO, a device
or a directory), its format (by extension, checked against the bytes), its encoding (UTF-8, UTF-8 with BOM,
UTF-16 with BOM, else Windows-1252 or Latin-1) and, for delimited text, its delimiter. Every problem is a
:class:`~torchwork.errors.DataError` naming the file and what to do.

Example:
    >>> from torchwork.data.tables_detect import decode, detect_delimiter
    >>> decoded = decode("\\ufeffid;text\\n1;café\\n".encode("utf-8"), "x.csv")
    >>> decoded.encoding, detect_delimiter(decoded.sample(), "x.csv")
    ('utf-8-sig', ';')
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import os
import re
import stat
from pathlib import Path

from torchwork.errors import DataError
from torchwork.paths import NotRegularFile, open_regular

SAMPLE_BYTES = 64 * 1024
# The largest max_bytes a caller may set: read_regular_file holds the whole file in memory (pandas several
# times more), so 1 TiB is past any machine's memory; file.read itself overflows at 2**63.
MAX_READ_BYTES = 2**40
GROWTH_STEP = 64 * 2**20  # bytes read at a time past the size a file had when opened
DELIMITERS = (",", ";", "\t", "|")
FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".txt": "txt", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".parquet": "parquet", ".pq": "parquet"}
# Bytes that never occur in text (C0 controls other than tab, newlines, form feed and escape).
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
_MAGIC = ((b"\x1f\x8b", "a gzip archive: decompress it first (gunzip)"),
          (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook?): unzip it, or save the sheet as CSV"),
          (b"\xd0\xcf\x11\xe0", "an old Excel/Office document: save the sheet as CSV"),
          (b"BZh", "a bzip2 archive: decompress it first (bunzip2)"),
          (b"\xfd7zXZ", "an xz archive: decompress it first (unxz)"),
          (b"%PDF", "a PDF document"), (b"PAR1", "a Parquet file: name it .parquet"),
          (b"SQLite format 3", "an SQLite database: export the table as CSV"))
# The compressed extensions, with the command that decompresses one (a gzip named .csv is found by its bytes).
_COMPRESSED = {".gz": "gunzip", ".gzip": "gunzip", ".bz2": "bunzip2", ".xz": "unxz", ".zst": "unzstd",
               ".zip": "unzip", ".7z": "7z x"}
_CP1252_UNDEFINED = frozenset(b"\x81\x8d\x8f\x90\x9d")
_NON_ASCII = bytes(range(128, 256))
_SURROGATES = re.compile("[\udc80-\udcff]+")


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, which must be a regular file (a symlink to one is fine) of at most ``max_bytes``.

    The file is opened non-blocking and checked with ``fstat`` after opening, so a FIFO swapped in after a
    first check still cannot block the reader.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        target = f" (a symlink to {os.readlink(path)}, which does not exist)" if path.is_symlink() else ""
        raise DataError(f"{path}: no such file{target}. Check the path (relative paths start at "
                        f"{Path.cwd()}).") from None
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror}). Check the path and its permissions.") from None
    _require_regular(path, info.st_mode)
    try:
        fd = open_regular(path)
    except NotRegularFile as error:
        _require_regular(path, error.mode)
        raise
    except OSError as error:
        raise DataError(f"{path}: cannot be opened ({error.strerror}). Check its permissions.") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if info.st_size > max_bytes:
            raise DataError(f"{path} is {_size(info.st_size)}, over the limit of {_size(max_bytes)} (max_bytes). "
                            "Use a sample of the file, or raise max_bytes if this machine has the memory.")
        # read(n) reserves n bytes before it reads one: ask for the file's size and a byte more, never
        # max_bytes (read(2**36) of a 30-byte file is a MemoryError on a 23 GB machine).
        want = min(info.st_size, max_bytes) + 1
        data = handle.read(want)
        while len(data) == want and want <= max_bytes:  # it grew since fstat: read on, a step at a time
            want = min(len(data) + GROWTH_STEP, max_bytes + 1)
            data += handle.read(want - len(data))
    if len(data) > max_bytes:
        raise DataError(f"{path} grew past the limit of {_size(max_bytes)} (max_bytes) while it was read. "
                        "Read a finished copy of the file.")
    return data


def _require_regular(path: Path, mode: int) -> None:
    kinds = ((stat.S_ISDIR, "a directory; give the path of a file inside it"),
             (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    for test, kind in kinds:
        if test(mode):
            raise DataError(f"{path} is {kind}, not a regular file; torchwork reads only regular files "
                            "(write the data to a file first).")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path} is not a regular file; write the data to a file first.")


def _size(n: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


def file_format(path: Path) -> str:
    """``csv``, ``tsv``, ``txt`` (delimited text), ``jsonl`` or ``parquet``, from the file's extension; a
    DataError for another extension, or for a path without a known one that does not exist."""
    suffix = path.suffix.lower()
    if suffix in FORMATS:
        return FORMATS[suffix]
    if not os.path.lexists(path):  # a mistyped folder is no file of the wrong kind
        raise DataError(f"{path}: no such file or folder. Check the path (relative paths start at {Path.cwd()}).")
    hints = {".json": " Write one JSON object per line and name it .jsonl.",
             ".xlsx": " Save the sheet as CSV.", ".xls": " Save the sheet as CSV."}
    tool = _COMPRESSED.get(suffix)
    if tool is not None:
        inner = path.with_suffix("")
        raise DataError(f"{path} is compressed ({suffix}); torchwork reads it decompressed. Decompress it first "
                        f"({tool} {path.name}) and give {inner.name if inner.suffix else 'the file inside'}.")
    raise DataError(f"{path}: torchwork reads labelled text from {', '.join(sorted(FORMATS))} files, not "
                    f"{suffix or 'files without an extension'}.{hints.get(suffix, ' Rename it if it is one.')}")


def check_not_binary(data: bytes, path: Path, expected: str) -> None:
    """Refuse a file whose first 64 KB are not text: a known binary signature, UTF-16 without a byte-order
    mark, or more than 1% control bytes (NUL included). A few control bytes are characters of the rows that
    hold them, wherever they are: the data report names and cleans them."""
    head = data[:SAMPLE_BYTES]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return  # UTF-16 text is half NUL bytes; decode() bounds its NUL characters
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise DataError(f"{path} is not {expected}: it is {what}.")
    if _utf16_without_bom(head):
        raise DataError(f"{path} looks like UTF-16 text without a byte-order mark (every other byte is NUL). "
                        "Save it as UTF-8, or as UTF-16 with a byte-order mark (BOM).")
    controls = [m.start() for m in _CONTROL.finditer(head)]
    if len(controls) > _control_limit(len(head)):
        detail = f"{len(controls):,} control bytes, the first {head[controls[0]]:#04x} at offset {controls[0]:,},"
        raise DataError(f"{path} is not {expected}: it looks binary ({detail} in the first 64 KB; text has "
                        "few). Export the data as CSV, TSV, JSON Lines or Parquet, and check the file is the "
                        "one you meant.")


def _control_limit(length: int) -> int:
    """The most control bytes (or NUL characters) text of ``length`` bytes may hold: 1%, and 8 in any file."""
    return max(8, length // 100)


def _utf16_without_bom(head: bytes) -> bool:
    """True when NUL bytes fill one of the even and odd positions and not the other: ASCII in UTF-16."""
    if len(head) < 4:
        return False
    even, odd = head[0::2], head[1::2]
    shares = sorted((even.count(0) / len(even), odd.count(0) / len(odd)))
    return shares[1] >= 0.3 and shares[0] <= 0.05


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A text file's bytes as UTF-8 for the parser, with the encoding it was read in.

    ``sentinel``: the character that marks bytes invalid in ``encoding`` (None when there were none); the
    reader finds the rows that hold it and then writes U+FFFD in its place.
    """

    utf8: bytes
    encoding: str
    sentinel: str | None

    def sample(self) -> str:
        """The first 64 KB as text, cut after the last complete line."""
        text = self.utf8[:SAMPLE_BYTES].decode("utf-8", errors="ignore")
        cut = text.rfind("\n")
        return text[:cut + 1] if 0 <= cut and len(self.utf8) > SAMPLE_BYTES else text


def decode(data: bytes, path: str | Path) -> Decoded:
    """Detect the encoding of ``data`` and re-encode it as UTF-8 (no BOM).

    UTF-8 when the bytes are valid UTF-8, or when they hold more valid multi-byte characters than invalid
    bytes (a UTF-8 file with a few damaged rows); else Windows-1252, or Latin-1 when bytes undefined in
    Windows-1252 occur. A BOM decides UTF-8 or UTF-16 outright.
    """
    if data.startswith(codecs.BOM_UTF8):
        return _as_utf8(data[len(codecs.BOM_UTF8):], "utf-8-sig")
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            text = data[len(bom):].decode(codec, errors="replace")
            if text.count("\x00") > _control_limit(len(text)):
                raise DataError(f"{path} holds {text.count(chr(0)):,} NUL characters, over 1% of its text: it "
                                "is not a text file. Export the data as CSV, TSV, JSON Lines or Parquet.")
            return Decoded(text.encode("utf-8", errors="replace"), "utf-16", None)
    if _likely_utf8(data):
        return _as_utf8(data, "utf-8")
    encoding = "latin-1" if _CP1252_UNDEFINED.intersection(data) else "cp1252"
    return Decoded(data.decode(encoding).encode("utf-8"), encoding, None)


def _as_utf8(data: bytes, encoding: str) -> Decoded:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return _mark_invalid(data.decode("utf-8", errors="surrogateescape"), encoding)
    return Decoded(data, encoding, None)


def _likely_utf8(data: bytes) -> bool:
    """True for valid UTF-8, and for bytes with more valid multi-byte characters than invalid bytes (UTF-8
    with a few damaged rows rather than another encoding)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="surrogateescape")
        invalid = sum(len(m) for m in _SURROGATES.findall(text))
        valid_multibyte = len(text) - len(data.translate(None, _NON_ASCII)) - invalid
        return valid_multibyte >= invalid
    return True


def _mark_invalid(text: str, encoding: str) -> Decoded:
    """Replace each run of undecodable bytes (surrogate escapes) by a character the text does not hold."""
    sentinel = next(c for c in ("\ufffd", *map(chr, range(0xF8FF, 0xE000, -1))) if c not in text)
    return Decoded(_SURROGATES.sub(sentinel, text).encode("utf-8"), encoding, sentinel)


def detect_delimiter(sample: str, path: str | Path, prefer: str = ",") -> str:
    """The delimiter among comma, semicolon, tab and pipe that splits the sample into a constant number
    (at least two) of fields, quoted fields and all; ``prefer`` breaks ties.

    csv.Sniffer is not used: it misreads quoted fields that span lines.
    """
    scores = []
    for delimiter in DELIMITERS:
        widths = _record_widths(sample, delimiter)
        if widths and widths[0] > 1:
            consistent = sum(w == widths[0] for w in widths) / len(widths)
            scores.append((round(consistent, 2), delimiter == prefer, widths[0], delimiter))
    if not scores:
        header = sample.split("\n", 1)[0][:80]
        raise DataError(f"{path} has a single column (header {header!r}); a labelled text file needs a text "
                        "column and a label column, separated by commas, semicolons, tabs or pipes.")
    return max(scores)[3]


def _record_widths(sample: str, delimiter: str) -> list[int]:
    widths: list[int] = []
    try:
        for record in csv.reader(sample.splitlines(keepends=True), delimiter=delimiter):
            if record:
                widths.append(len(record))
    except csv.Error:
        pass
    return widths[:-1] if len(widths) > 2 else widths  # the last record of a sample may be cut short


def header_names(sample: str, delimiter: str) -> list[str]:
    """The header row's fields, as written (pandas renames duplicates, so they are read here)."""
    for record in csv.reader(sample.splitlines(keepends=True), delimiter=delimiter):
        return record
    return []


def find_overlong_run(utf8: bytes, delimiter: str, limit_chars: int) -> int | None:
    """The 1-based line of the first stretch without a delimiter or newline that is certainly a field over
    ``limit_chars`` characters (more than 4 bytes per allowed character), or None.

    Only a cheap guard against a gigabyte-long line reaching the parser; fields just over the limit are found
    after parsing, by row.
    """
    import numpy as np

    limit_bytes = 4 * limit_chars
    if len(utf8) <= limit_bytes:
        return None
    chunk, run, newlines = 64 * 2**20, 0, 0
    for start in range(0, len(utf8), chunk):
        part = np.frombuffer(utf8, dtype=np.uint8, count=min(chunk, len(utf8) - start), offset=start)
        stops = np.flatnonzero((part == 10) | (part == ord(delimiter)))
        bounds = np.concatenate(([-1 - run], stops, [len(part)]))
        gaps = np.diff(bounds) - 1
        if gaps.max() > limit_bytes:
            first = int(bounds[int(np.argmax(gaps > limit_bytes))])
            return newlines + int(np.count_nonzero(part[:max(first + 1, 0)] == 10)) + 1
        run = int(gaps[-1])
        newlines += int(np.count_nonzero(part == 10))
    return None
