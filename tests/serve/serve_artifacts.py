"""Real artifacts written by ``torchwork.deploy.export`` for the serving tests (seconds each).

- a text classifier: ``TfidfNGramClassifier`` (the quickstart's model) trained for a few steps on a few hundred real tweets with the
  engine, exported (pt2, ONNX, INT8) with its ``TextPreprocessor``, labels, softmax and held-out tweets;
- a tensor classifier: a small CNN on scikit-learn's real 8x8 digits, input (batch, 1, 8, 8), exported
  with labels but no softmax (the server applies it);
- edge cases: a digits MLP exported with a static batch of 4, and a text model exported with a static
  length of 6 token ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from serve_models import DIGIT_LABELS, train_briefly
from shared_builds import built_once
from torch import nn

STATIC_BATCH = 4
STATIC_LENGTH = 6


@dataclass
class TextArtifact:
    path: Path
    classes: list[str]
    tweets: list[str]  # held-out tweets (not trained on)


@dataclass
class DigitsArtifact:
    path: Path
    images: np.ndarray  # (N, 1, 8, 8) float32 in [0, 1], held out


def _few_threads() -> int:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on a shared machine: more threads only contend
    return threads


def build_text_artifact(out: Path) -> TextArtifact:
    """Train an n-gram classifier on 480 real tweets for 3 short epochs and export it with 128 others."""
    from torchwork import Trainer
    from torchwork.data import TextDataset, TextPreprocessor, class_weights, load_dataset, loader
    from torchwork.deploy import export
    from torchwork.recipes.models import TfidfNGramClassifier

    threads = _few_threads()
    try:
        dataset = load_dataset("tweets", seed=0)
        # The splits list their rows class by class: draw seeded rows, not the first ones.
        rng = np.random.default_rng(0)
        rows = rng.permutation(len(dataset.train))[:480].tolist()
        train = TextDataset([dataset.train.texts[i] for i in rows], [dataset.train.labels[i] for i in rows])
        rows = rng.permutation(len(dataset.test))[:128].tolist()
        test_texts = [dataset.test.texts[i] for i in rows]
        test_labels = [dataset.test.labels[i] for i in rows]
        classes = list(dataset.classes)
        pre = TextPreprocessor.fit(train.texts, min_freq=1)
        torch.manual_seed(0)
        model = TfidfNGramClassifier(list(pre.vocab), len(classes), buckets=1021, char_buckets=1021)
        model.fit_idf(pre(train.texts)[0])
        trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=0.03),
                          nn.CrossEntropyLoss(weight=class_weights(train.labels)), device="cpu", progress=False)
        trainer.fit(loader(train, 32, shuffle=True, seed=0, num_workers=0, preprocessor=pre), epochs=3)
        export(model, pre(train.texts[:8]), out, formats=("pt2", "onnx"), preprocess=pre, labels=classes,
               softmax=True, samples=test_texts, targets=test_labels, quantize="int8", quantize_ops=("Gather",),
               verify_rounds=2)
    finally:
        torch.set_num_threads(threads)
    return TextArtifact(out, classes, test_texts)


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.from_numpy((data.images / 16.0).astype("float32")).unsqueeze(1)
    return images, torch.from_numpy(data.target.astype("int64"))


def build_digits_artifact(out: Path, seed: int = 0) -> DigitsArtifact:
    """A digits CNN trained on 1,500 images (weights drawn with ``seed``), exported (pt2, ONNX) with the other
    297 held out."""
    from torchwork.deploy import export

    threads = _few_threads()
    try:
        images, targets = digits()
        torch.manual_seed(seed)
        model = train_briefly(DigitsCNN(), (images[:1500],), targets[:1500], steps=60)
        export(model, images[:4], out, formats=("pt2", "onnx"), labels=DIGIT_LABELS, samples=images[1500:],
               targets=targets[1500:], verify_rounds=2)
    finally:
        torch.set_num_threads(threads)
    return DigitsArtifact(out, images[1500:].numpy())


def shared_digits_artifact() -> DigitsArtifact:
    """:func:`build_digits_artifact` with seed 0, built once for all the run's workers: read it, copy it to
    change it."""
    folder = built_once("digits-artifact", lambda into: build_digits_artifact(into / "artifact"))
    return DigitsArtifact(folder / "artifact", digits()[0][1500:].numpy())


def shared_text_artifact() -> TextArtifact:
    """:func:`build_text_artifact`, built once for all the run's workers: read it, copy it to change it."""

    def build(into: Path) -> None:
        made = build_text_artifact(into / "artifact")
        (into / "held_out.json").write_text(json.dumps({"classes": made.classes, "tweets": made.tweets}))

    folder = built_once("text-artifact", build)
    held_out = json.loads((folder / "held_out.json").read_text())
    return TextArtifact(folder / "artifact", held_out["classes"], held_out["tweets"])


def build_static_batch_artifact(out: Path) -> nn.Module:
    """A digits MLP exported (pt2) with a static batch of ``STATIC_BATCH``; returns the eager model."""
    from torchwork.deploy import export

    images, targets = digits()
    torch.manual_seed(0)
    model = train_briefly(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), (images[:500],), targets[:500], steps=30)
    export(model, images[:STATIC_BATCH].flatten(1), out, formats=("pt2",), dynamic_batch=False,
           labels=DIGIT_LABELS, softmax=True)
    return model


class MeanEmbedding(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, 8, padding_idx=0)
        self.head = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        summed = self.embedding(ids).sum(dim=1)
        return self.head(summed / lengths.unsqueeze(1).to(summed.dtype))


def build_static_length_artifact(out: Path, texts: list[str]) -> tuple[nn.Module, object]:
    """A text model exported (pt2) with token ids of a static length; returns (eager model, preprocessor)."""
    from torchwork.deploy import TokenIdsPreprocessor, export

    pre = TokenIdsPreprocessor.fit(texts)
    torch.manual_seed(0)
    model = MeanEmbedding(pre.vocab_size).eval()
    export(model, pre(texts[:4], max_length=STATIC_LENGTH), out, formats=("pt2",), dynamic_length=False,
           preprocess=pre, labels=["a", "b"], softmax=True)
    return model, pre


class MaskedMeanEmbedding(nn.Module):
    """Token ids and attention mask (a SubwordTokenizer's outputs) -> logits: an embedding's masked mean."""

    def __init__(self, vocab_size: int, classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, 16)
        self.head = nn.Linear(16, classes)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.unsqueeze(-1).to(torch.float32)
        pooled = (self.embedding(ids) * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)


def build_subword_artifact(out: Path) -> TextArtifact:
    """A masked-mean embedding classifier over MiniLM's real WordPiece tokenizer (its tokenizer.json bundled),
    trained briefly on 400 real tweets and exported (ONNX)."""
    from torchwork.data import load_dataset
    from torchwork.deploy import export
    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.finetune.minilm import minilm_folder

    threads = _few_threads()
    try:
        dataset = load_dataset("tweets", seed=0)
        rng = np.random.default_rng(0)
        rows = rng.permutation(len(dataset.train))[:400].tolist()
        texts = [dataset.train.texts[i] for i in rows]
        tokenizer = SubwordTokenizer.from_file(minilm_folder() / "tokenizer.json", max_length=48)
        classes = list(dataset.classes)
        torch.manual_seed(0)
        model = train_briefly(MaskedMeanEmbedding(tokenizer.tokenizer.get_vocab_size(), len(classes)),
                              tokenizer(texts), torch.tensor([dataset.train.labels[i] for i in rows]), steps=20)
        export(model, tokenizer(texts[:8]), out, formats=("onnx",), preprocess=tokenizer, labels=classes,
               softmax=True, verify_rounds=1)
    finally:
        torch.set_num_threads(threads)
    return TextArtifact(out, classes, [dataset.test.texts[i] for i in range(0, 200, 10)])
