"""engine/evaluation.py: evaluation goes through the training step's own forward-and-loss path."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import batches
from torch import nn

from torchwork import Trainer
from torchwork.errors import BatchError, LossError


def _trainer(loss_fn, **options) -> Trainer:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn, device="cpu", progress=False,
                   threads=1, **options)


def _named(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"mse": nn.functional.mse_loss(outputs, targets), "l1": nn.functional.l1_loss(outputs, targets)}


def test_named_losses_are_weighted_as_in_training_and_each_is_reported() -> None:
    trainer = _trainer(_named, loss_weights={"l1": 0.5}, metrics={"mae": lambda o, t: (o - t).abs().mean()})
    data = batches(2)
    metrics = trainer.evaluate(data, prefix="val_")
    assert list(metrics) == ["val_loss", "val_mae", "val_loss_mse", "val_loss_l1"]
    assert metrics["val_loss"] == pytest.approx(metrics["val_loss_mse"] + 0.5 * metrics["val_loss_l1"])
    assert metrics["val_mae"] == pytest.approx(metrics["val_loss_l1"])


@pytest.mark.parametrize(("loss_fn", "options", "message"), [
    (lambda o, t: (o - t) ** 2, {}, r"the loss has shape \(8, 1\); backward\(\) needs a scalar"),
    (_named, {"loss_weights": {"huber": 1.0}}, r"loss_weights names \['huber'\], but loss_fn returned only"),
    (lambda o, t: {}, {}, "loss_fn returned an empty dict"),
])
def test_evaluate_refuses_a_loss_as_the_training_step_does(loss_fn, options, message) -> None:
    trainer = _trainer(loss_fn, **options)
    with pytest.raises(LossError, match=message):
        trainer.step(batches(1)[0])
    with pytest.raises(LossError, match=message):
        trainer.evaluate(batches(1))


def test_a_batch_that_is_not_a_pair_is_refused_at_any_batch() -> None:
    trainer = _trainer(nn.MSELoss())
    data = [*batches(1), (torch.randn(8, 4),)]
    with pytest.raises(BatchError, match="cannot split the batch into"):
        trainer.evaluate(data)


def test_a_step_fn_is_evaluated_with_the_plain_model_in_eval_mode() -> None:
    seen: list[bool] = []

    def step_fn(model: nn.Module, batch) -> torch.Tensor:
        seen.append(model.training)
        inputs, targets = batch
        return nn.functional.mse_loss(model(inputs), targets)

    trainer = _trainer(None, step_fn=step_fn)
    metrics = trainer.evaluate(batches(2))
    assert seen == [False, False] and set(metrics) == {"loss"}
