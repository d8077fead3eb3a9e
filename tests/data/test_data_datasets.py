"""Real loads of the four datasets: rows, label counts, disjoint splits, identical splits run to run."""

from __future__ import annotations

import pytest
import torch

from torchwork.data import load_dataset
from torchwork.data.datasets import _load, bundled_text_rows, fashion_mnist_files, stratified_split
from torchwork.errors import ConfigError, DataError


def _fashion_available() -> str | None:
    try:
        fashion_mnist_files()
    except DataError as error:
        return str(error)
    return None


def test_tweets_real_counts() -> None:
    tweets = load_dataset("tweets")
    assert tweets.classes == ["negative", "neutral", "positive"]
    # 38,158 rows in the file (16,186 / 15,018 / 6,954); cleaning drops 2,155 duplicates.
    assert tweets.cleaning.rows_in == 38_158
    assert tweets.cleaning.removed == {"empty": 0, "duplicates": 2_155}
    assert tweets.counts() == {"train": [12_450, 11_018, 5_335], "validation": [1_556, 1_377, 667],
                               "test": [1_556, 1_377, 667]}
    text, label = tweets.train[0]
    assert isinstance(text, str) and label in (0, 1, 2)


def test_rotten_tomatoes_real_counts() -> None:
    reviews = load_dataset("rotten_tomatoes")
    assert reviews.classes == ["rotten", "fresh"]
    # 13,905 rows, 1,097 of them plot summaries; 12,752 distinct raw reviews, 12,751 after cleaning.
    assert reviews.cleaning.rows_in == 12_808
    assert sum(sum(c) for c in reviews.counts().values()) == 12_751
    assert reviews.counts() == {"train": [4_307, 5_894], "validation": [538, 737], "test": [538, 737]}


def test_digits_real_counts() -> None:
    digits = load_dataset("digits")
    counts = digits.counts()
    assert [sum(counts[s]) for s in ("train", "validation", "test")] == [1_439, 179, 179]
    assert [sum(col) for col in zip(*counts.values())] == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    image, label = digits.test[0]
    assert image.shape == (1, 8, 8) and image.dtype == torch.float32
    assert 0.0 <= image.min() and image.max() <= 1.0


def test_fashion_mnist_real_counts() -> None:
    missing = _fashion_available()
    if missing:
        pytest.skip(missing)
    fashion = load_dataset("fashion_mnist")
    assert fashion.classes[0] == "T-shirt/top" and fashion.classes[9] == "Ankle boot"
    assert fashion.counts() == {"train": [5_400] * 10, "validation": [600] * 10, "test": [1_000] * 10}
    image, label = fashion.train[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32 and 0 <= label < 10
    assert float(image.max()) <= 1.0 and float(image.max()) > 0.5


def test_missing_fashion_mnist_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # dpkg cannot be found
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        fashion_mnist_files()


@pytest.mark.parametrize("name", ["tweets", "rotten_tomatoes"])
def test_no_text_in_two_splits(name: str) -> None:
    splits = load_dataset(name)
    train, val, test = (set(getattr(splits, s).texts) for s in ("train", "validation", "test"))
    assert not (train & val) and not (train & test) and not (val & test)
    assert len(train) == len(splits.train)  # no duplicates inside a split either


def test_splits_identical_across_loads_and_seed_changes_them() -> None:
    first = load_dataset("tweets").fingerprint
    _load.cache_clear()  # a genuinely new parse of the file
    again = load_dataset("tweets")
    assert again.fingerprint == first
    assert load_dataset("digits", seed=1).fingerprint != load_dataset("digits", seed=0).fingerprint


def test_description_lists_every_class_and_split() -> None:
    text = str(load_dataset("rotten_tomatoes"))
    assert "rotten" in text and "fresh" in text and "validation" in text
    assert "12,751" in text and "duplicates      removed      57 rows" in text


def test_stratified_split_keeps_class_shares() -> None:
    labels = [0] * 900 + [1] * 100
    train, val, test = stratified_split(labels, seed=3)
    assert (len(train), len(val), len(test)) == (800, 100, 100)
    assert sum(labels[i] for i in val) == 10 and sum(labels[i] for i in test) == 10
    with pytest.raises(ConfigError, match="sum to 1"):
        stratified_split(labels, (0.5, 0.5, 0.5))


@pytest.mark.parametrize(("size", "expected"), [(1, (1, 0, 0)), (2, (1, 0, 1)), (3, (1, 1, 1)), (4, (2, 1, 1)),
                                                (5, (3, 1, 1)), (15, (11, 2, 2))])
def test_a_small_class_still_gets_a_test_row_and_then_a_validation_row(size, expected) -> None:
    labels = [0] * 100 + [1] * size
    parts = stratified_split(labels, seed=0)
    assert tuple(sum(labels[i] for i in part) for part in parts) == expected
    assert tuple(len(part) - sum(labels[i] for i in part) for part in parts) == (80, 10, 10)
    _, val, test = stratified_split(labels, (0.9, 0.1, 0.0), seed=0)  # a validation carved from train
    assert sum(labels[i] for i in val) == min(size - 1, round(size * 0.1) or 1) and len(test) == 0


def test_unknown_dataset_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match="rotten_tomatoes"):
        load_dataset("imdb")


def test_bundled_rows_are_the_file_before_cleaning() -> None:
    path, texts, labels, classes = bundled_text_rows("tweets")
    assert path.name.endswith(".csv") and len(texts) == len(labels) == load_dataset("tweets").cleaning.rows_in
    assert set(labels) == set(classes)
    with pytest.raises(ConfigError, match="not a bundled text dataset"):
        bundled_text_rows("fashion_mnist")
