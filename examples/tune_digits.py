"""An objective of your own for ``torchwork.tune.tune_objective``: a small MLP on scikit-learn's 8x8 digits,
trained by the Trainer; its score is the best validation accuracy.

    from torchwork.tune import tune_objective
    tune_objective("examples/tune_digits.py:objective", {"lr": {"low": 1e-3, "high": 0.1, "log": True}},
                   trials=8, metric="val_accuracy", workers=2, run_dir="runs/digits")

Each worker process loads this file by that name (``path/to/file.py:function``), so the objective is a
plain function in a file, not a closure. Crash safety and pruning come from the two things it gives its
Trainer: ``run_dir=trial.run_dir`` (a killed trial's retry resumes the newest run there from its last
checkpoint) and ``callbacks=trial.callbacks`` (each epoch's ``val_accuracy`` reported, a pruned trial
stopped). The test rows are not touched: the study compares validation scores only.
"""

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer, seed_everything


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return (outputs.argmax(dim=1) == targets).float().mean().item()


def objective(trial) -> float:
    seed_everything(trial.seed)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    # 60% train, 20% validation (scored here), 20% test (kept for the final model, never read by the study)
    x_rest, _, y_rest, _ = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    x_train, x_val, y_train, y_val = train_test_split(x_rest, y_rest, test_size=0.25, stratify=y_rest,
                                                      random_state=0)
    hidden = int(trial.params.get("hidden", 64))
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=64, shuffle=True)
    val = DataLoader(TensorDataset(x_val, y_val), batch_size=512)
    epochs = int(trial.params.get("epochs", 4))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=trial.params["lr"], momentum=0.9),
                      nn.CrossEntropyLoss(), epoch_metrics={"accuracy": accuracy}, threads=trial.threads,
                      run_dir=trial.run_dir, callbacks=trial.callbacks, progress=False,
                      config={**trial.params, "epochs": epochs, **trial.record})
    trainer.fit(train, val, epochs=epochs)
    return max(logs["val_accuracy"] for logs in trainer.history)
