"""More public ``torchwork.data`` functions refuse a bad argument with one ConfigError before any work: the
readers' size limits (read_text_table, read_image_folder, audit_images), the audits' settings and per-row
sequences (audit_texts, label_noise_candidates), classification_metrics' digits and classes, the text
preprocessor's max_length and load_dataset's seed. NaN, 2.5, True, 0, -1 and 5000-digit ints (whose repr
Python itself refuses) are each named in the message with what to pass instead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from torchwork import data as D
from torchwork.data.image_audit import inspect_image
from torchwork.data.label_noise import out_of_fold_probabilities
from torchwork.errors import ConfigError

TEXTS = [f"text {i} good" for i in range(40)]
LABELS = ["a", "b"] * 20
VOCAB = ["<pad>", "<unk>", "a"]
HUGE = 10**5000  # its repr raises ValueError in Python 3.11: the message must not be built with it
SHOWN_HUGE = r"<an integer of 5001 digits or so>"
NAN = float("nan")


def _never(*args, **kwargs):
    raise AssertionError("work began: the bad setting was not refused first")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("text,label\nhello there,a\ngood bye,b\n")
    return path


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(tmp_path / label / f"{i}.png")
    return tmp_path


COUNT = r"must be an integer in \[1, 1099511627776\]"


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"max_bytes": NAN}, rf"max_bytes=nan {COUNT} \(the largest file read, in bytes; 2\*\*40",
                 id="bytes-nan"),
    pytest.param({"max_bytes": HUGE}, rf"max_bytes={SHOWN_HUGE} {COUNT}", id="bytes-huge"),
    pytest.param({"max_bytes": 2**63}, rf"max_bytes=9223372036854775808 {COUNT}", id="bytes-2**63"),
    pytest.param({"max_bytes": 0}, rf"max_bytes=0 {COUNT}", id="bytes-0"),
    pytest.param({"max_bytes": 1024.0}, rf"max_bytes=1024\.0 {COUNT}", id="bytes-float"),
    pytest.param({"max_field_chars": 2.5}, rf"max_field_chars=2\.5 {COUNT} \(the longest field, in characters",
                 id="field-float"),
    pytest.param({"max_field_chars": HUGE}, rf"max_field_chars={SHOWN_HUGE} {COUNT}", id="field-huge"),
    pytest.param({"max_field_chars": True}, rf"max_field_chars=True {COUNT}", id="field-bool"),
])
def test_read_text_table_refuses_a_bad_limit_before_reading(monkeypatch, table, settings, message) -> None:
    monkeypatch.setattr("torchwork.data.tables_detect.read_regular_file", _never)
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.read_text_table(table, **settings)


LENGTH = r"must be an integer in \[1, 1048576\] \(tokens kept of a text, 2\*\*20\), or None for no cap\."


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"max_length": -1}, rf"max_length=-1 {LENGTH}", id="max-length-negative"),
    pytest.param({"max_length": 0}, rf"max_length=0 {LENGTH}", id="max-length-0"),
    pytest.param({"max_length": 2**20 + 1}, rf"max_length=1048577 {LENGTH}", id="max-length-past"),
    pytest.param({"max_length": NAN}, rf"max_length=nan {LENGTH}", id="max-length-nan"),
    pytest.param({"max_length": HUGE}, rf"max_length={SHOWN_HUGE} {LENGTH}", id="max-length-huge"),
    pytest.param({"suggested_length": 0}, rf"suggested_length=0 {LENGTH}", id="suggested-0"),
    pytest.param({"suggested_length": 8.0}, rf"suggested_length=8\.0 {LENGTH}", id="suggested-float"),
    pytest.param({"label_noise": "no"}, r"label_noise='no' must be True or False\.", id="label-noise-text"),
    pytest.param({"label_noise": 0}, r"label_noise=0 must be True or False\.", id="label-noise-int"),
    pytest.param({"seed": -1}, r"seed=-1: must be >= 0\.", id="seed-negative"),
    pytest.param({"seed": HUGE}, rf"seed={SHOWN_HUGE}: must be <= 4294967295", id="seed-huge"),
    pytest.param({"token_lengths": [1, 2]}, r"token_lengths has 2 entries for 40 texts: pass one per text, in the "
                                            r"same order, or None\.$", id="token-lengths-short"),
    pytest.param({"rows": [1, 2]}, r"rows has 2 entries for 40 texts: pass one per text", id="rows-short"),
    pytest.param({"splits": ["train"] * 41}, r"splits has 41 entries for 40 texts", id="splits-long"),
    pytest.param({"labels": LABELS[:3]}, r"labels has 3 entries for 40 texts: pass one per text, in the same "
                                         r"order\.$", id="labels-short"),
])
def test_audit_texts_refuses_a_bad_setting_before_reading_a_text(monkeypatch, settings, message) -> None:
    monkeypatch.setattr("torchwork.data.audit.match_key", _never)
    arguments = {"labels": LABELS, "token_lengths": [3] * 40, "max_length": 8, "label_noise": False, **settings}
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.audit_texts(TEXTS, **arguments)


def test_audit_texts_keeps_refusing_with_a_value_error_and_an_empty_list() -> None:
    with pytest.raises(ValueError, match=r"^labels has 3 entries"):  # ConfigError is a ValueError: callers keep working
        D.audit_texts(TEXTS, LABELS[:3], label_noise=False)
    with pytest.raises(ConfigError, match=r"^texts is empty: pass at least one text"):
        D.audit_texts([], [], label_noise=False)


FOLDS = r"must be an integer in \[2, 100\] \(cross-validation folds; 5 is the default"


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"folds": 0}, rf"folds=0 {FOLDS}", id="folds-0"),
    pytest.param({"folds": 1}, rf"folds=1 {FOLDS}", id="folds-1"),
    pytest.param({"folds": 101}, rf"folds=101 {FOLDS}", id="folds-past"),
    pytest.param({"folds": HUGE}, rf"folds={SHOWN_HUGE} {FOLDS}", id="folds-huge"),
    pytest.param({"folds": 5.0}, rf"folds=5\.0 {FOLDS}", id="folds-float"),
    pytest.param({"seed": -1}, r"seed=-1: must be >= 0\.", id="seed-negative"),
    pytest.param({"seed": 2**32}, r"seed=4294967296: must be <= 4294967295", id="seed-2**32"),
    pytest.param({"labels": LABELS[:10]}, r"labels has 10 entries for 40 texts: pass one label per text",
                 id="labels-short"),
])
def test_label_noise_refuses_a_bad_setting_before_any_fit(monkeypatch, settings, message) -> None:
    monkeypatch.setattr("torchwork.data.label_noise.cross_validatable", _never)
    arguments = {"labels": LABELS, **settings}
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.label_noise_candidates(TEXTS, **arguments)
    with pytest.raises(ConfigError, match=rf"^{message}"):
        out_of_fold_probabilities(TEXTS, **arguments)


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"max_files": 0}, r"max_files=0 must be an integer in \[1, 1000000000\] \(image files read at "
                                   r"most\)\.", id="files-0"),
    pytest.param({"max_files": HUGE}, rf"max_files={SHOWN_HUGE} must be an integer", id="files-huge"),
    pytest.param({"max_files": 10.0}, r"max_files=10\.0 must be an integer", id="files-float"),
    pytest.param({"max_depth": -1}, r"max_depth=-1 must be an integer in \[0, 256\] \(folder levels read below a "
                                    r"class folder; 0 reads only the class folder itself\)\.", id="depth-negative"),
    pytest.param({"max_depth": 257}, r"max_depth=257 must be an integer in \[0, 256\]", id="depth-past"),
    pytest.param({"max_depth": NAN}, r"max_depth=nan must be an integer", id="depth-nan"),
])
def test_read_image_folder_refuses_a_bad_limit_before_the_folder(tmp_path, settings, message) -> None:
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.read_image_folder(tmp_path / "missing", **settings)  # the limit is named, not the missing folder


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"max_bytes": 0}, rf"max_bytes=0 {COUNT} \(the largest image file read", id="bytes-0"),
    pytest.param({"max_bytes": NAN}, rf"max_bytes=nan {COUNT}", id="bytes-nan"),
    pytest.param({"max_bytes": HUGE}, rf"max_bytes={SHOWN_HUGE} {COUNT}", id="bytes-huge"),
    pytest.param({"max_pixels": 0}, r"max_pixels=0 must be an integer in \[1, 17179869184\] \(the most pixels an "
                                    r"image may decode to; 2\*\*34\), or None for Pillow's limit\.", id="pixels-0"),
    pytest.param({"max_pixels": -5}, r"max_pixels=-5 must be an integer", id="pixels-negative"),
    pytest.param({"max_pixels": NAN}, r"max_pixels=nan must be an integer", id="pixels-nan"),
    pytest.param({"seed": -1}, r"seed=-1: must be >= 0\.", id="seed-negative"),
    pytest.param({"seed": 2.5}, r"seed=2\.5: use an integer in \[0, 4294967295\]", id="seed-float"),
    pytest.param({"progress": 3}, r"progress=3 must be a function of \(done, total\), or None\.", id="progress"),
])
def test_audit_images_refuses_a_bad_setting_before_reading_an_image(monkeypatch, image_folder, settings,
                                                                    message) -> None:
    data = D.read_image_folder(image_folder)
    monkeypatch.setattr("torchwork.data.image_facts.read_regular_file", _never)
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.audit_images(data, **settings)
    if "max_bytes" in settings or "max_pixels" in settings:
        with pytest.raises(ConfigError, match=rf"^{message}"):
            inspect_image(data.paths[0], **settings)  # a TypeError, or a silent 'unreadable file', before


DIGITS = r"must be an integer in \[0, 17\] \(decimals kept of each score; float64 holds 17 significant digits\)\."


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"digits": -1}, rf"digits=-1 {DIGITS}", id="digits-negative"),
    pytest.param({"digits": 18}, rf"digits=18 {DIGITS}", id="digits-past"),
    pytest.param({"digits": HUGE}, rf"digits={SHOWN_HUGE} {DIGITS}", id="digits-huge"),
    pytest.param({"digits": 2.0}, rf"digits=2\.0 {DIGITS}", id="digits-float"),
    pytest.param({"digits": True}, rf"digits=True {DIGITS}", id="digits-bool"),
    pytest.param({"classes": True}, r"classes=True must be an integer in \[1, 10000\] \(the number of classes\), a "
                                    r"list of class names, or None\.", id="classes-bool"),
    pytest.param({"classes": 0}, r"classes=0 must be an integer in \[1, 10000\]", id="classes-0"),
    pytest.param({"classes": 10**9}, r"classes=1000000000 must be an integer in \[1, 10000\]", id="classes-10**9"),
    pytest.param({"classes": HUGE}, rf"classes={SHOWN_HUGE} must be an integer", id="classes-huge"),
])
def test_classification_metrics_refuses_bad_digits_and_class_counts(monkeypatch, settings, message) -> None:
    monkeypatch.setattr("torchwork.data.metrics.class_ids", _never)
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.classification_metrics([0, 1], [0, 1], **settings)


@pytest.mark.parametrize(("max_length", "shown"), [
    pytest.param(0, "0", id="0"),
    pytest.param(-1, "-1", id="negative"),
    pytest.param(2**20 + 1, "1048577", id="past"),
    pytest.param(NAN, "nan", id="nan"),
    pytest.param(2.5, r"2\.5", id="float"),
    pytest.param(True, "True", id="bool"),
    pytest.param(HUGE, SHOWN_HUGE, id="10**5000"),
])
def test_text_preprocessor_refuses_a_bad_max_length_wherever_it_is_given(max_length, shown) -> None:
    message = rf"^max_length={shown} {LENGTH}"
    with pytest.raises(ConfigError, match=message):
        D.TextPreprocessor(VOCAB, max_length=max_length)  # a good vocabulary: the length is what is wrong
    with pytest.raises(ConfigError, match=message):
        D.TextPreprocessor(["a"], max_length=max_length)  # named before the vocabulary's own problem
    with pytest.raises(ConfigError, match=message):
        D.TextPreprocessor.fit((_never() for _ in range(1)), max_length=max_length)  # before any text is counted
    with pytest.raises(ConfigError, match=message):
        D.TextPreprocessor(VOCAB)(["a a a"], max_length=max_length)
    with pytest.raises(ConfigError, match=message):
        D.TextCollate(D.TextPreprocessor(VOCAB), max_length=max_length)


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"seed": -1}, r"seed=-1: must be >= 0\.", id="seed-negative"),
    pytest.param({"seed": 2.5}, r"seed=2\.5: use an integer in \[0, 4294967295\]", id="seed-float"),
    pytest.param({"seed": HUGE}, rf"seed={SHOWN_HUGE}: must be <= 4294967295", id="seed-huge"),
    pytest.param({"name": 3}, r"unknown dataset 3; torchwork knows \['digits', ", id="name-int"),
    pytest.param({"cleaning": {"lowercase": True}}, r"cleaning=\{'lowercase': True\} must be a CleaningConfig, or "
                                                    r"None for its defaults\.", id="cleaning-dict"),
])
def test_load_dataset_refuses_a_bad_argument_before_loading(monkeypatch, settings, message) -> None:
    monkeypatch.setattr("torchwork.data.datasets._load", _never)
    arguments = {"name": "digits", **settings}
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.load_dataset(**arguments)


def test_good_calls_still_work(table, image_folder) -> None:
    read = D.read_text_table(table, max_bytes=np.int64(2**40), max_field_chars=np.int64(11))
    assert read.texts == ["hello there", "good bye"]
    assert D.read_text_table(table, max_bytes=4 * 2**30, max_field_chars=1_000_000).labels == ["a", "b"]
    report = D.audit_texts(TEXTS, LABELS, token_lengths=[3] * 39 + [9], max_length=np.int64(8),
                           suggested_length=2**20, label_noise=False, seed=2**32 - 1)
    assert [f.kind for f in report.findings] == ["truncated"]
    assert D.label_noise_candidates(TEXTS, LABELS, folds=100, seed=2**32 - 1) == \
        D.label_noise_candidates(TEXTS, LABELS, folds=np.int64(20), seed=2**32 - 1)  # cut to the 20 rows a class
    data = D.read_image_folder(image_folder, max_files=np.int64(4), max_depth=0)
    assert data.classes == ["cat", "dog"] and len(data.paths) == 4
    assert D.audit_images(data, seed=2**32 - 1, max_bytes=2**40, max_pixels=2**34).splits
    assert D.classification_metrics([0, 1], [0, 0], digits=0)["macro_f1"] == 0.0
    assert D.classification_metrics([0, 1], [0, 0], classes=np.int64(3), digits=17)["classes"] == ["0", "1", "2"]
    assert D.TextPreprocessor(VOCAB, max_length=2**20).max_length == 2**20
    ids, lengths = D.TextPreprocessor(VOCAB, max_length=np.int64(2))(["a a a"])
    assert lengths.tolist() == [2] and type(D.TextPreprocessor(VOCAB, max_length=np.int64(2)).max_length) is int


def test_the_largest_max_bytes_reserves_no_memory_for_a_small_file(table) -> None:
    from torchwork.data.tables_detect import read_regular_file

    # read(max_bytes + 1) reserved max_bytes before reading: MemoryError at 2**36 on a 23 GB machine.
    assert read_regular_file(table, 2**40) == table.read_bytes()


@pytest.mark.parametrize(("max_bytes", "refused"), [(1000, False), (100, False), (99, True), (50, True)])
def test_a_file_that_grows_while_read_is_read_to_the_limit(monkeypatch, tmp_path, max_bytes, refused) -> None:
    import os

    from torchwork.data import tables_detect
    from torchwork.errors import DataError

    path = tmp_path / "growing.csv"
    path.write_bytes(b"x" * 100)
    real_fstat = os.fstat

    def fstat_when_opened(fd):  # the size the file had when opened: 10 bytes, before 90 more were written
        info = real_fstat(fd)
        return os.stat_result((*info[:6], 10, *info[7:]))

    monkeypatch.setattr(tables_detect.os, "fstat", fstat_when_opened)
    monkeypatch.setattr(tables_detect, "GROWTH_STEP", 7)
    if refused:
        with pytest.raises(DataError, match=r"grew past the limit .* \(max_bytes\) while it was read"):
            tables_detect.read_regular_file(path, max_bytes)
    else:
        assert tables_detect.read_regular_file(path, max_bytes) == b"x" * 100


def test_the_text_bounds_of_the_data_layer_are_the_recipes_bounds() -> None:
    """data/text.py restates two caps of recipes/config.py (data sits below recipes and may not import it):
    the same max_length or min_freq must be taken or refused alike by `--set` and by TextPreprocessor."""
    from torchwork.data import text
    from torchwork.recipes import config

    assert (text.MAX_TOKENS, text.MAX_WORDS) == (config.MAX_TOKENS, config.MAX_ROWS)
