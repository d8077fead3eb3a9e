"""Digits: a small MLP on scikit-learn's 8x8 handwritten digits, trained with the engine.

Features shown: seeded stratified split, Trainer with AdamW + cosine schedule, gradient clipping,
early stopping on validation accuracy, evaluation and prediction in eval mode.

Run it: ``torchwork digits`` (:func:`torchwork.recipes.cli.cli_digits`), or call :func:`run`.
"""

from __future__ import annotations

import time
from typing import Any


def run(epochs: int = 8, seed: int = 0, batch_size: int = 64, verbose: bool = True) -> dict[str, Any]:
    """Train, evaluate on the held-out test split, and return a summary dict."""
    from types import SimpleNamespace

    from torchwork.recipes.config import MAX_BATCH_SIZE, MAX_EPOCHS, check_settings

    check_settings(SimpleNamespace(epochs=epochs, seed=seed, batch_size=batch_size),  # before any work
                   at_least={"epochs": 1, "seed": 0, "batch_size": 1},
                   at_most={"epochs": MAX_EPOCHS, "batch_size": MAX_BATCH_SIZE})  # the seed: < 2**32
    import numpy as np
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from torchwork import EarlyStopping, Trainer
    from torchwork.engine.metrics import accuracy

    torch.manual_seed(seed)
    np.random.seed(seed)
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")  # pixel values are 0..16
    y = digits.target.astype("int64")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, stratify=y, random_state=seed)
    x_train, x_val, y_train, y_val = train_test_split(x_train, y_train, test_size=0.125, stratify=y_train,
                                                      random_state=seed)

    def loader(features: Any, labels: Any, shuffle: bool) -> DataLoader:
        dataset = TensorDataset(torch.from_numpy(features), torch.from_numpy(labels))
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                          generator=torch.Generator().manual_seed(seed))

    train, val, test = loader(x_train, y_train, True), loader(x_val, y_val, False), loader(x_test, y_test, False)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(train))
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="auto", clip_grad_norm=1.0,
                      metrics={"accuracy": accuracy},
                      early_stopping=EarlyStopping("val_accuracy", mode="max", patience=3))
    if verbose:
        print(trainer.explain())
    started = time.perf_counter()
    history = trainer.fit(train, val, epochs=epochs)
    seconds = time.perf_counter() - started
    test_metrics = trainer.evaluate(test, prefix="test_")
    predictions = trainer.predict(test).argmax(dim=1)
    summary = {
        "dataset": {"train": len(x_train), "validation": len(x_val), "test": len(x_test), "classes": 10},
        "epochs_run": len(history),
        "train_seconds": round(seconds, 2),
        "final_train_loss": round(history[-1]["train_loss"], 4),
        "best_val_accuracy": round(max(h["val_accuracy"] for h in history), 4),
        "test_loss": round(test_metrics["test_loss"], 4),
        "test_accuracy": round(test_metrics["test_accuracy"], 4),
        "predicted_test_rows": int(predictions.numel()),
        "device": str(trainer.device),
    }
    if verbose:
        print("\nepoch  train_loss  val_loss  val_accuracy  grad_norm  samples/s")
        for h in history:
            print(f"{h['epoch']:>5}  {h['train_loss']:>10.4f}  {h['val_loss']:>8.4f}  {h['val_accuracy']:>12.4f}"
                  f"  {h['grad_norm']:>9.3f}  {h['samples_per_s']:>9,.0f}")
        print(f"\ntest accuracy {summary['test_accuracy']:.4f} on {len(x_test)} held-out digits "
              f"({summary['epochs_run']} epochs, {seconds:.1f} s on {trainer.device})")
    return summary
