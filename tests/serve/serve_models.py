"""Models the serving tests run, and the factories a server process builds them with.

- a digits MLP trained briefly on scikit-learn's real 8x8 digits (tensor items of shape (64,)), served
  by PyTorch or by ONNX Runtime from a file exported with torch.onnx.export(dynamo=True);
- a small text classifier (Embedding + mean + MLP) over a stand-in vocabulary, trained briefly on synthetic
  sentences (the point is HTTP behaviour, not the model);
- a deliberately slow model (it sleeps as long as its input says) for overflow, timeouts and shutdown.

``build_models(folder)`` writes them all; ``--factory serve_models:<name>`` with that folder loads one.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from torchwork.serve import OnnxPredictor, TorchPredictor

DIGIT_LABELS = [str(d) for d in range(10)]
TEXT_LABELS = ["negative", "positive"]
GOOD = "good great excellent lovely wonderful fine superb happy".split()
BAD = "bad awful terrible poor horrible sad boring ugly".split()
FILLER = "the movie was a film and plot acting it really very quite this".split()


class Vocabulary:
    """Stand-in for torchwork.data.text.TextPreprocessor: texts -> (ids (N, L), lengths (N,)); 0 pads, 1 unknown."""

    def __init__(self, words: list[str], max_length: int = 64) -> None:
        self.index = {word: i + 2 for i, word in enumerate(words)}
        self.max_length = max_length

    def __call__(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [[self.index.get(t, 1) for t in re.findall(r"\w+", text.lower())][: self.max_length] or [1]
                for text in texts]
        ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return ids, torch.tensor([len(r) for r in rows])


class TextClassifier(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 32, classes: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, classes))

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        summed = self.embedding(ids).sum(dim=1)
        return self.head(summed / lengths.clamp(min=1).unsqueeze(1).to(summed.dtype))


def digits_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


class SlowModel(nn.Module):
    """A linear layer over 4 numbers that first sleeps, once per call, as many seconds as the largest
    ``item[0]`` in the batch (at most 5): the tests choose how long each batch takes."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(float(x[:, 0].max().clamp(0, 5)))
        return self.linear(x)


def sentences(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for _ in range(n):
        label = int(rng.integers(2))
        words = list(rng.choice(FILLER, size=int(rng.integers(3, 10))))
        words += list(rng.choice(GOOD if label else BAD, size=int(rng.integers(1, 3))))
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def train_briefly(model: nn.Module, inputs: tuple[torch.Tensor, ...], targets: torch.Tensor, steps: int
                  ) -> nn.Module:
    """Full-batch Adam for ``steps`` steps; the model comes back in eval mode."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(*inputs), targets).backward()
        optimizer.step()
    return model.eval()


def build_models(folder: Path) -> None:
    """Train both models briefly (seconds), save their weights, export the digits MLP to ONNX."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on a shared machine: more threads only contend
    try:
        build_digits(folder)
        build_text(folder)
    finally:
        torch.set_num_threads(threads)


def build_digits(folder: Path) -> None:
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype("float32"))
    y = torch.from_numpy(digits.target.astype("int64"))
    mlp = digits_mlp()
    train_briefly(mlp, (x,), y, steps=150)
    torch.save(mlp.state_dict(), folder / "digits.pt")
    torch.onnx.export(mlp, (x[:2],), str(folder / "digits.onnx"), dynamo=True, input_names=["pixels"],
                      dynamic_shapes={"input": {0: torch.export.Dim("batch", max=4096)}}, verbose=False)


def build_text(folder: Path) -> None:
    torch.manual_seed(0)
    words = sorted(set(GOOD + BAD + FILLER))
    (folder / "vocab.json").write_text(json.dumps(words))
    texts, labels = sentences(600, seed=0)
    text_model = TextClassifier(len(words) + 2)
    train_briefly(text_model, Vocabulary(words)(texts), torch.tensor(labels), steps=100)
    torch.save(text_model.state_dict(), folder / "text.pt")


def load_digits_mlp(folder: str | Path) -> nn.Module:
    model = digits_mlp()
    model.load_state_dict(torch.load(Path(folder) / "digits.pt", weights_only=True))
    return model.eval()


def load_text(folder: str | Path) -> tuple[TextClassifier, Vocabulary]:
    words = json.loads((Path(folder) / "vocab.json").read_text())
    model = TextClassifier(len(words) + 2)
    model.load_state_dict(torch.load(Path(folder) / "text.pt", weights_only=True))
    return model.eval(), Vocabulary(words)


# ---------------------------------------------------------------- factories: --factory serve_models:NAME
def text_predictor(folder: str) -> TorchPredictor:
    model, vocabulary = load_text(folder)
    return TorchPredictor(model, kind="text", preprocess=vocabulary, labels=TEXT_LABELS, name="text")


def digits_torch_predictor(folder: str) -> TorchPredictor:
    return TorchPredictor(load_digits_mlp(folder), item_shape=(64,), labels=DIGIT_LABELS, name="digits")


def digits_onnx_predictor(folder: str) -> OnnxPredictor:
    return OnnxPredictor(Path(folder) / "digits.onnx", labels=DIGIT_LABELS, name="digits-onnx")


def slow_model() -> SlowModel:
    torch.manual_seed(0)
    return SlowModel().eval()


def slow_predictor(folder: str) -> TorchPredictor:
    return TorchPredictor(slow_model(), item_shape=(4,), name="slow")


class RefusingModel(nn.Module):
    """A linear layer over 4 numbers that raises when an item's first number is negative: one bad item."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x[:, 0] < 0).any()):
            raise ValueError("this model refuses a negative first number")
        return self.linear(x)


def refusing_predictor(folder: str) -> TorchPredictor:
    torch.manual_seed(0)
    return TorchPredictor(RefusingModel().eval(), item_shape=(4,), name="refusing")


def unbuildable_predictor(folder: str) -> TorchPredictor:
    raise FileNotFoundError(f"no model file in {folder}")


def crashing_predictor(folder: str) -> TorchPredictor:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)  # like a segfault in native code while loading
    raise AssertionError("unreachable")


class SlowVocabulary(Vocabulary):
    """The text model's vocabulary, taking 1 s per 200,000 characters, as preprocessing long texts does:
    64 items of 10,000 characters take 3.2 s, a tweet a fraction of a millisecond."""

    def __call__(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(sum(map(len, texts)) / 200_000)
        return super().__call__(texts)


def slow_text_predictor(folder: str) -> TorchPredictor:
    model, vocabulary = load_text(folder)
    slow = SlowVocabulary([])
    slow.index, slow.max_length = vocabulary.index, vocabulary.max_length
    return TorchPredictor(model, kind="text", preprocess=slow, labels=TEXT_LABELS, name="slow-text")


def wrong_labels_predictor(folder: str) -> TorchPredictor:
    """The digits MLP (10 outputs) declared with 5 labels: a model that cannot answer its labels."""
    return TorchPredictor(load_digits_mlp(folder), item_shape=(64,), labels=DIGIT_LABELS[:5], name="wrong-labels")


def slow_start_predictor(folder: str) -> TorchPredictor:
    """The text model, which takes two minutes to build in a model process (the server's own copy builds at
    once): a server interrupted while its model process builds. The model process first creates the file
    ``$SERVE_TEST_BUILDING`` names, if set: it is building from then on."""
    import multiprocessing
    import os

    if multiprocessing.parent_process() is not None:
        if os.environ.get("SERVE_TEST_BUILDING"):
            Path(os.environ["SERVE_TEST_BUILDING"]).touch()
        time.sleep(120)
    return text_predictor(folder)
