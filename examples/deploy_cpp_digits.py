"""A model factory for `torchwork export`: the digits MLP, trained for a few epochs on scikit-learn's digits.

Run (see docs/deploy-cpp.md):
torchwork export examples/deploy_cpp_digits.py:build --format pt2,pt2-aoti --cpp -o artifacts/digits-cpp
torchwork verify artifacts/digits-cpp --cpp --trust native
"""
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

from torchwork import Trainer


def build() -> dict:
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    batches = [(x_train[i:i + 64], y_train[i:i + 64]) for i in range(0, len(x_train), 64)]
    Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), device="cpu",
            progress=False).fit(batches, epochs=10)
    return {"model": model, "example_inputs": x_test[:8], "samples": x_test, "targets": y_test.tolist(),
            "labels": [str(d) for d in range(10)]}
