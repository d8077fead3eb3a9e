"""engine/explain.py: trainer.explain(), the step's order for the Trainer's settings."""

from __future__ import annotations

import torch
from engine_helpers import small_trainer


def test_the_order_follows_the_settings() -> None:
    text = small_trainer(threads=1, accumulate=2, clip_grad_norm=1.0).explain()
    assert "accumulate=2" in text and "loss *= samples in this micro-batch" in text
    assert text.index("clip_grad_norm_(max_norm=1.0)") < text.index("optimizer.step()")
    assert "scheduler.step() (once per optimizer step)" in text
    assert text.splitlines()[-1] == "  every 50 steps: log loss, lr, grad_norm"


def test_a_plateau_scheduler_is_said_once_per_epoch() -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    from torchwork import Trainer

    trainer = Trainer(model, optimizer, torch.nn.MSELoss(), torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer),
                      device="cpu", progress=False, threads=1)
    text = trainer.explain()
    assert "once per epoch: scheduler.step(val_loss)" in text and "once per optimizer step" not in text
