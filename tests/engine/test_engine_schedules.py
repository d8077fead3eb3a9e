"""When the Trainer steps the scheduler: StepLR written per epoch (pytorch/examples' MNIST: step_size=1,
gamma=0.7) is stepped per epoch, equal to the hand loop bit for bit; schedules sized in steps stay per step;
an explicit interval is honoured; per-epoch stepping resumes exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.errors import ConfigError
from torchwork.schedules import scheduler_interval

EPOCHS, BATCHES = 3, 6


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(BATCHES * 16, 10, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return [(x[i:i + 16], y[i:i + 16]) for i in range(0, len(x), 16)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))


def _mnist_shape(model: nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.StepLR]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)


def test_steplr_written_per_epoch_is_stepped_per_epoch_as_the_hand_loop_does(capsys) -> None:
    hand = _model()
    optimizer, schedule = _mnist_shape(hand)
    for _ in range(EPOCHS):  # pytorch/examples' MNIST: scheduler.step() after each epoch
        for x, y in _data():
            optimizer.zero_grad()
            nn.functional.cross_entropy(hand(x), y).backward()
            optimizer.step()
        schedule.step()
    model = _model()
    optimizer, schedule = _mnist_shape(model)
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), schedule, device="cpu", threads=1)
    trainer.fit(_data(), epochs=EPOCHS)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * 0.7 ** EPOCHS)  # not 0.5 * 0.7 ** 18
    for a, b in zip(hand.parameters(), model.parameters()):
        assert torch.equal(a, b)
    said = capsys.readouterr().err
    assert "scheduler: stepped once per epoch (StepLR's step_size=1 fits in the run's 3 epochs" in said
    assert "once per epoch: scheduler.step()" in trainer.explain()


@pytest.mark.parametrize(("make", "interval"), [
    (lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=EPOCHS * BATCHES), "step"),
    (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=EPOCHS * BATCHES), "step"),
    (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=EPOCHS), "epoch"),
    (lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[1, 2]), "epoch"),
    (lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9), "epoch"),
    (lambda o: torch.optim.lr_scheduler.LinearLR(o, total_iters=BATCHES), "step"),  # a warm-up over steps
    (lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda n: 0.9 ** n), "step"),
])
def test_auto_reads_what_the_scheduler_counts(make, interval) -> None:
    optimizer = torch.optim.SGD(_model().parameters(), lr=1.0)
    plan = scheduler_interval(make(optimizer), epochs=EPOCHS, steps_per_epoch=BATCHES)
    assert plan.interval == interval, plan.reason


def test_an_explicit_interval_is_honoured_and_a_bad_one_refused_before_work() -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.5 ** epoch)  # counts epochs
    Trainer(model, optimizer, nn.CrossEntropyLoss(), schedule, device="cpu", threads=1, progress=False,
            scheduler_interval="epoch").fit(_data(), epochs=2)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)
    with pytest.raises(ConfigError, match="scheduler_interval='weekly'"):
        Trainer(model, optimizer, nn.CrossEntropyLoss(), schedule, scheduler_interval="weekly")
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(ConfigError, match="ReduceLROnPlateau"):
        Trainer(model, optimizer, nn.CrossEntropyLoss(), plateau, scheduler_interval="step")


def test_a_run_stepped_per_epoch_resumes_exactly_from_its_mid_epoch_checkpoint(tmp_path) -> None:
    def run(epochs: int, resume=None) -> Trainer:
        model = _model()
        optimizer, schedule = _mnist_shape(model)
        trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), schedule, device="cpu", threads=1,
                          progress=False, run_dir=tmp_path / "runs", checkpoint_every_n_steps=4)
        trainer.fit(_data(), epochs=epochs, resume=resume)
        return trainer

    whole = run(EPOCHS)
    first = run(EPOCHS)
    checkpoint = sorted((first.run_path / "checkpoints").glob("step-*.pt"))[1]  # step 8: mid-epoch 2
    resumed = run(EPOCHS, resume=checkpoint)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(0.5 * 0.7 ** EPOCHS)
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
