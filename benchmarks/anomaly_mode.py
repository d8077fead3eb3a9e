"""What ``torch.autograd.set_detect_anomaly(True)`` left on costs a training loop, on two small real models.

Prints one JSON object. Each figure is CPU time (process_time) on 1 thread of a fixed number of training
steps (forward, backward, AdamW step), with anomaly mode off and on, the variants alternated and each one's
fastest repeat kept (the machine is shared and noisy); the ratio on/off is the slowdown the doctor's
``anomaly-mode`` finding quotes.

* cnn: a small convolutional net on scikit-learn's 8x8 digits (1,797 real images), batch 64.
* transformer: a 2-layer character transformer (d=64, 4 heads, context 64) on this repository's README.

Run: ``python benchmarks/anomaly_mode.py [--repeats 3] [--steps 30]``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from sklearn.datasets import load_digits
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


def digits_cnn() -> tuple[nn.Module, Callable[[int], Batch]]:
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 4 * 4, 10))

    def batch(step: int) -> Batch:
        start = (step * 64) % (len(x) - 64)
        return x[start:start + 64], y[start:start + 64]
    return model, batch


class CharTransformer(nn.Module):
    def __init__(self, vocab: int, d: int = 64, context: int = 64) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, d), nn.Embedding(context, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.embed(idx) + self.position(torch.arange(idx.shape[1]))
        return self.head(self.blocks(h, mask=self.mask, is_causal=True))


def char_transformer() -> tuple[nn.Module, Callable[[int], Batch]]:
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    model = CharTransformer(len(chars))
    model.loss = lambda logits, y: nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    def batch(step: int) -> Batch:
        starts = (torch.arange(16) * 997 + step * 131) % (len(data) - 65)
        rows = torch.stack([data[s:s + 65] for s in starts.tolist()])
        return rows[:, :-1], rows[:, 1:]
    return model, batch


def train_seconds(make: Callable[[], tuple[nn.Module, Callable[[int], Batch]]], steps: int, anomaly: bool) -> float:
    torch.manual_seed(0)
    model, batch = make()
    loss_fn = getattr(model, "loss", nn.functional.cross_entropy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = [batch(step) for step in range(steps)]
    with torch.autograd.set_detect_anomaly(anomaly):
        started = time.process_time()
        for x, y in batches:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    options = parser.parse_args()
    torch.set_num_threads(1)
    figures: dict[str, dict[str, float]] = {}
    for name, make in (("cnn", digits_cnn), ("transformer", char_transformer)):
        train_seconds(make, 3, False)  # warm up
        off, on = [], []
        for _ in range(options.repeats):
            off.append(train_seconds(make, options.steps, False))
            on.append(train_seconds(make, options.steps, True))
        figures[name] = {"off_s": round(min(off), 3), "on_s": round(min(on), 3),
                         "slowdown": round(min(on) / min(off), 2)}
    record({"steps": options.steps, "threads": 1, **figures})


if __name__ == "__main__":
    main()
