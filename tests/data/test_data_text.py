"""TextPreprocessor: fit on train only, vocabulary limits, padding, and an identical reload."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch

from torchwork.data import TextCollate, TextPreprocessor, load_dataset
from torchwork.data.cleaning import CleaningConfig
from torchwork.errors import ConfigError, DataError


@functools.lru_cache(maxsize=1)
def tweets_preprocessor() -> TextPreprocessor:
    return TextPreprocessor.fit(load_dataset("tweets").train.texts, min_freq=2, max_vocab=8_000)


def test_fit_on_real_train_split() -> None:
    pre = tweets_preprocessor()
    assert pre.vocab_size == 8_000 and pre.pad_id == 0 and pre.unk_id == 1
    assert pre.vocab[:2] == ["<pad>", "<unk>"]
    assert {"<user>", "<url>", "<num>", "don't", "driverless"} <= set(pre.vocab)
    assert pre.fit_info["texts"] == 28_803
    ids, lengths = pre(["@united my flight 89 was cancelled!!! http://t.co/x"])
    assert pre.decode(ids[0]) == ["<user>", "my", "flight", "<num>", "was", "cancelled", "!", "!", "!", "<url>"]
    assert lengths.tolist() == [10]


def test_vocabulary_comes_from_train_only() -> None:
    pre = TextPreprocessor.fit(["good film", "good plot"], min_freq=1)
    assert "terrible" not in pre.vocab
    ids, _ = pre(["terrible film"])
    assert ids.tolist() == [[pre.unk_id, pre.index["film"]]]


def test_min_freq_and_max_vocab() -> None:
    texts = ["a a a b b c"]
    assert TextPreprocessor.fit(texts, min_freq=2).vocab == ["<pad>", "<unk>", "a", "b"]
    assert TextPreprocessor.fit(texts, min_freq=1, max_vocab=3).vocab == ["<pad>", "<unk>", "a"]
    with pytest.raises(ConfigError):
        TextPreprocessor.fit(texts, min_freq=0)
    with pytest.raises(ConfigError, match="max_vocab=2 leaves no room"):
        TextPreprocessor.fit(texts, max_vocab=2)
    for bad in (float("nan"), 2.5):  # NaN passed 'min_freq < 1' and kept no word, silently
        with pytest.raises(ConfigError, match="min_freq=.* must be an integer in \\[1, 1000000000\\]"):
            TextPreprocessor.fit(texts, min_freq=bad)
        with pytest.raises(ConfigError, match="max_vocab=.* leaves no room"):
            TextPreprocessor.fit(texts, max_vocab=bad)
    with pytest.raises(DataError, match="no texts"):
        TextPreprocessor.fit([])


def test_padding_lengths_truncation_and_empty_text() -> None:
    pre = TextPreprocessor.fit(["one two three four"], min_freq=1)
    ids, lengths = pre(["one two three four", "two", "", "   \u00a0"])
    assert ids.dtype == torch.long and lengths.dtype == torch.long
    assert ids.shape == (4, 4) and lengths.tolist() == [4, 1, 1, 1]
    assert ids[1].tolist() == [pre.index["two"], 0, 0, 0]
    assert ids[2].tolist() == [pre.unk_id, 0, 0, 0]  # empty text: one <unk>, never a zero-length row
    short, short_lengths = pre(["one two three four"], max_length=2)
    assert short.tolist() == [[pre.index["one"], pre.index["two"]]] and short_lengths.tolist() == [2]
    assert pre([])[0].shape == (0, 1)
    with pytest.raises(ConfigError, match="list of texts"):
        pre("one two")  # type: ignore[arg-type]


def test_save_and_load_give_identical_preprocessing(tmp_path: Path) -> None:
    pre = tweets_preprocessor()
    path = pre.save(tmp_path / "run")
    assert path == tmp_path / "run" / "preprocess.json"
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["preprocess.json"]  # no temp left
    loaded = TextPreprocessor.load(tmp_path / "run")
    assert loaded == pre and TextPreprocessor.load(path) == pre
    test_texts = load_dataset("tweets").test.texts[:500]
    for a, b in zip(pre(test_texts, max_length=40), loaded(test_texts, max_length=40)):
        assert torch.equal(a, b)
    raw = "RT @united: 2 hours on hold\u2026 I don\xd5\xa2_\x8a\xce_\x86\xa2t even"
    assert loaded.clean(raw) == pre.clean(raw) == "rt <user>: <num> hours on hold\u2026 i don't even"
    data = json.loads(path.read_text())
    assert TextPreprocessor.from_dict(data) == pre
    json.dumps(pre.to_dict())


def test_settings_travel_with_the_file(tmp_path: Path) -> None:
    pre = TextPreprocessor.fit(["Visit http://x.y NOW"], min_freq=1, max_length=2,
                               cleaning=CleaningConfig(urls="<link>", lowercase=False))
    pre.save(tmp_path)
    loaded = TextPreprocessor.load(tmp_path)
    assert loaded.max_length == 2 and loaded.cleaning.urls == "<link>"
    assert loaded.tokenize("Visit http://a.b NOW") == ["Visit", "<link>", "NOW"]
    assert loaded(["Visit http://a.b NOW"])[1].tolist() == [2]


def test_damaged_or_missing_files_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no text preprocessor"):
        TextPreprocessor.load(tmp_path)
    (tmp_path / "preprocess.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        TextPreprocessor.load(tmp_path)
    (tmp_path / "preprocess.json").write_text('{"format": "something-else"}')
    with pytest.raises(DataError, match="not a torchwork text preprocessor"):
        TextPreprocessor.load(tmp_path)


def test_collate_gives_the_engine_batch_shape() -> None:
    pre = tweets_preprocessor()
    items = [load_dataset("tweets").train[i] for i in range(5)]
    (ids, lengths), labels = TextCollate(pre, max_length=16)(items)
    assert ids.shape[0] == 5 and ids.shape[1] <= 16 and lengths.max() == ids.shape[1]
    assert labels.tolist() == [label for _, label in items]
    with pytest.raises(DataError, match=r"\(text, label\)"):
        TextCollate(pre)(["just text"])  # type: ignore[list-item]


def test_max_size_is_a_deprecated_name_of_max_vocab() -> None:
    texts = ["a a a b b c"]
    with pytest.warns(FutureWarning, match=r"fit\(max_size=\.\.\.\) is deprecated: write max_vocab=\.\.\."):
        old = TextPreprocessor.fit(texts, min_freq=1, max_size=3)
    assert old == TextPreprocessor.fit(texts, min_freq=1, max_vocab=3)
    assert old.vocab == ["<pad>", "<unk>", "a"] and old.fit_info["max_vocab"] == 3
    with pytest.raises(ConfigError, match="both max_size= and max_vocab="):
        TextPreprocessor.fit(texts, max_size=3, max_vocab=4)
