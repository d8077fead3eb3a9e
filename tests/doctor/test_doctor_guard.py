"""Guard mode: the cheap checks, per step and as a Trainer callback; silent on healthy training."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from torchwork.doctor.guard import DoctorWarning, Guard, attach_guard
from torchwork.errors import ConfigError


def _steps(model: nn.Module, guard: Guard, steps: int, *, lr: float = 0.05, batch: int = 16,
           x_scale: float = 1.0, scaler: torch.amp.GradScaler | None = None) -> None:
    optimizer = guard.optimizer
    for _ in range(steps):
        x = torch.randn(batch, 4) * x_scale
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        skipped = False
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            skipped = scaler.get_scale() < before
        guard.after_step(loss.detach(), batch_size=batch, skipped=skipped)


def _guarded(model: nn.Module, lr: float = 0.05, **options: object) -> Guard:
    return Guard(model, torch.optim.SGD(model.parameters(), lr=lr), **options)


def test_healthy_training_is_silent() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
    guard = _guarded(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DoctorWarning)
        _steps(model, guard, 60)
        model.eval()
        guard.before_evaluation()
    assert guard.findings == []


def test_nan_loss_warns_once_with_the_step() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    guard = _guarded(model)
    with pytest.warns(DoctorWarning, match=r"\[non-finite-loss\].*at step 3"):
        for step in range(1, 6):
            guard.after_step(torch.tensor(float("nan") if step >= 3 else 1.0), batch_size=8)
        guard.flush()  # the checks run every check_every steps; the step is still exact
    assert [f.id for f in guard.findings] == ["non-finite-loss"]
    assert guard.findings[0].file.endswith("test_doctor_guard.py")


def test_exploding_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    guard = _guarded(model, lr=0.05, check_every=2)
    with pytest.warns(DoctorWarning, match="exploding-gradients"):
        _steps(model, guard, 8, x_scale=30.0)  # diverges: norms grow by orders of magnitude
    assert [f.id for f in guard.findings] == ["exploding-gradients"]


def test_single_sample_batch_and_eval_mode_training() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    guard = _guarded(model)
    with pytest.warns(DoctorWarning):
        guard.after_step(torch.tensor(1.0), batch_size=1)
        model.eval()
        guard.after_step(torch.tensor(1.0), batch_size=8)
        guard.flush()
    assert [f.id for f in guard.findings] == ["batchnorm-single-sample", "train-mode"]


def test_frozen_batchnorm_is_not_train_mode() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    model[1].eval()  # frozen statistics on purpose, model itself in train mode
    guard = _guarded(model)
    _steps(model, guard, 5)
    assert guard.findings == []


def test_evaluation_in_training_mode() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5))
    guard = Guard(model, warn=False)
    guard.before_evaluation()
    assert [f.id for f in guard.findings] == ["eval-mode"]


def test_amp_scale_collapse() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
    guard = _guarded(model, scaler=scaler, check_every=5, warn=False)

    class Overflow(nn.Module):  # gradients are inf at every step, whatever the scale
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return model(x) * torch.tensor(float("inf"))

    optimizer = guard.optimizer
    for _ in range(10):
        optimizer.zero_grad()
        scaled = scaler.scale(Overflow()(torch.randn(8, 4)).clamp(max=1e30).mean())
        scaled.backward()
        before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        guard.after_step(None, batch_size=8, skipped=scaler.get_scale() < before)
    assert [f.id for f in guard.findings] == ["amp-scale-collapse"]


def test_guard_as_a_trainer_callback() -> None:
    from torchwork import Trainer

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
    guard = Guard(warn=False)
    data = [(torch.randn(16, 4), torch.randn(16, 1)) for _ in range(8)]
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.MSELoss(), device="cpu",
                      progress=False, callbacks=[guard], log_every_n_steps=1)
    trainer.fit(data, epochs=2)
    assert guard.model is model and guard.findings == []
    poisoned = [(x, torch.full_like(y, float("nan"))) for x, y in data]
    trainer.fit(poisoned, epochs=3)
    assert [f.id for f in guard.findings] == ["non-finite-loss"]


def test_attach_guard_binds_the_trainer() -> None:
    from torchwork import Trainer

    model = nn.Linear(4, 1)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), nn.MSELoss(), device="cpu",
                      progress=False)
    guard = attach_guard(trainer, warn=False)
    assert guard.model is trainer.model and guard.optimizer is trainer.optimizer
    trainer.step((torch.randn(8, 4), torch.randn(8, 1)))
    guard.after_step(torch.tensor(0.5), batch_size=8)
    assert guard.findings == [] and guard.steps == 1


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"check_every": 0}, r"check_every=0\): use an integer from 1", id="every-0"),
    pytest.param({"check_every": 2.5}, r"check_every=2.5\): use an integer", id="every-fraction"),  # taken
    pytest.param({"check_every": float("nan")}, r"check_every=nan\)", id="every-nan"),  # taken, never checked
    pytest.param({"max_grad_norm": float("nan")}, r"max_grad_norm=nan\): a gradient norm", id="norm-nan"),
    pytest.param({"max_grad_norm": 0}, r"max_grad_norm=0\)", id="norm-0"),
    pytest.param({"growth": 1}, r"growth=1\): .* above 1", id="growth-1"),
    pytest.param({"growth": float("inf")}, r"growth=inf\)", id="growth-inf"),
    pytest.param({"warn": "no"}, r"Guard\(warn\)='no': pass True or False", id="warn-str"),
])
def test_bad_option_is_a_config_error(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        Guard(**settings)


def test_guard_sees_parameter_groups_added_mid_run() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1)
    guard = Guard(model, optimizer, check_every=1, warn=False)
    optimizer.add_param_group({"params": list(model[1].parameters())})  # unfrozen during training
    model[1].weight.grad = torch.full_like(model[1].weight, 1e6)  # only the new group has gradients
    guard.after_step(torch.tensor(1.0), batch_size=8)
    assert [f.id for f in guard.findings] == ["exploding-gradients"]
