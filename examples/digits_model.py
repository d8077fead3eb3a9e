"""An export factory: a small MLP trained on scikit-learn's 8x8 digits, with what export needs to verify it.

    torchwork export examples/digits_model.py:build --format onnx --quantize int8 -o artifacts/digits
    torchwork serve artifacts/digits

``build()`` returns the model and its example inputs, the class names (so the server answers labels and
probabilities), and 360 held-out digits with their labels (so export verifies every variant on real rows).
"""
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer, seed_everything


def build() -> dict:
    seed_everything(0)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=64, shuffle=True)
    Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(),
            progress=False).fit(train, epochs=5)
    return {"model": model.eval(), "example_inputs": (x_test[:4],), "labels": [str(d) for d in range(10)],
            "softmax": True, "samples": x_test, "targets": y_test}
