"""Exported and INT8 variants vs eager on real digits: an MLP and a small CNN, 1 thread.

Each model is trained briefly with torchwork.Trainer on scikit-learn's digits, exported (pt2, ONNX, ONNX
Runtime dynamic INT8 of MatMul only; for the CNN also INT8 of MatMul + Conv), then measured by
torchwork.deploy.verify on the 360 held-out test digits: accuracy, latency at batch 1 and throughput at
batch 64 as ratios to the eager nn.Module (interleaved rounds, model only), and size. Also torch.ao's
dynamic INT8 (deprecated, not exportable) for comparison. Prints one JSON object.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from torchwork import Trainer
from torchwork.deploy import export, verify

torch.set_num_threads(1)
ROUNDS = 40


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                                      nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 10))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int) -> nn.Module:
    torch.manual_seed(0)
    batches = [(x[i:i + 64], y[i:i + 64]) for i in range(0, len(y), 64)]
    Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), device="cpu",
            progress=False).fit(batches, epochs=epochs)
    return model


def summarize(report: dict) -> dict:
    keys = ("accuracy", "latency_ratio", "throughput_ratio", "latency_b1_ms", "throughput_b64_per_s", "bytes")
    rows = {name: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k in keys}
            for name, row in report["variants"].items()}
    return {"variants": rows, "deploy": report["deploy"]}


def main() -> dict:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    torch.manual_seed(0)
    mlp = train(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)),
                x_train, y_train, epochs=15)
    cnn = train(DigitsCNN(), x_train.reshape(-1, 1, 8, 8), y_train, epochs=10)
    results = {"threads": 1, "rounds": ROUNDS, "test_rows": len(y_test)}
    cases = [("mlp", mlp, x_train, x_test, ("MatMul",)),
             ("cnn", cnn, x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8), ("MatMul",)),
             ("cnn_conv_too", cnn, x_train.reshape(-1, 1, 8, 8), x_test.reshape(-1, 1, 8, 8), ("MatMul", "Conv"))]
    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        for name, model, train_x, test_x, ops in cases:
            out = Path(root) / name
            export(model, train_x[:8], out, formats=("pt2", "onnx"), quantize="int8", quantize_ops=ops,
                   samples=test_x, targets=y_test, verify_rounds=1, threads=1, tolerance=0.02)
            report = verify(out, model=model, rounds=ROUNDS, threads=1, tolerance=0.02, torch_ao=True)
            results[name] = {"quantize_ops": list(ops), **summarize(report)}
    return results


if __name__ == "__main__":
    record(main())
