"""Mixed precision: bf16 autocast trains on CPU; fp16 skips steps with inf/NaN gradients."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.errors import ConfigError


def batches(n: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 8, generator=g), torch.randint(0, 2, (16,), generator=g)) for _ in range(n)]


class PoisonOnce(nn.Module):
    """Loss that is infinite for the batch with the given index (counted across calls)."""

    def __init__(self, poison_at: int) -> None:
        super().__init__()
        self.calls, self.poison_at = 0, poison_at
        self.inner = nn.CrossEntropyLoss()

    def forward(self, outputs, targets):
        loss = self.inner(outputs, targets)
        self.calls += 1
        return loss * float("inf") if self.calls - 1 == self.poison_at else loss


def fp16_trainer(model: nn.Module, loss_fn: nn.Module, **kwargs) -> Trainer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn, device="cpu",
                       precision="fp16", progress=False, **kwargs)


def test_fp16_inf_gradient_skips_the_step_and_keeps_weights():
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    trainer = fp16_trainer(model, PoisonOnce(poison_at=0), clip_grad_norm=1.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scale_before = trainer.scaler.get_scale()
    trainer.step(batches(1)[0])
    assert trainer.skipped_steps == 1
    assert trainer.scaler.get_scale() < scale_before
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    # the next, finite step does change the weights
    trainer.step(batches(1, seed=1)[0])
    assert trainer.skipped_steps == 1
    assert not torch.equal(model.weight, before["weight"])


def test_fp16_epoch_logs_skipped_steps_and_scale():
    model = nn.Linear(8, 2)
    history = fp16_trainer(model, PoisonOnce(poison_at=2)).fit(batches(6), epochs=1)
    assert history[0]["skipped_steps"] == 1
    assert history[0]["scale"] < 65536.0
    assert torch.isfinite(model.weight).all()


def test_fp16_scheduler_not_stepped_on_skipped_step():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Trainer(model, opt, PoisonOnce(poison_at=0), sched, device="cpu", precision="fp16",
                          progress=False, scheduler_interval="step")  # per step, as asked
    trainer.fit(batches(3), epochs=1)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)  # 3 steps, 1 skipped


def test_bf16_trains_on_cpu():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    trainer = Trainer(model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(),
                      device="cpu", precision="bf16", progress=False)
    data = batches(8)
    history = trainer.fit(data, val_loader=data, epochs=5)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert model[0].weight.dtype == torch.float32  # autocast keeps the master weights in fp32


class RecordDtype(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.seen: list[torch.dtype] = []

    def forward(self, x):
        self.seen.append(x.dtype)
        return self.linear(x)


def test_keep_fp32_runs_chosen_submodule_in_float32():
    model = nn.Sequential(nn.Linear(8, 8), RecordDtype(), nn.Linear(8, 2))
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                      device="cpu", precision="bf16", keep_fp32=[RecordDtype], progress=False)
    trainer.step(batches(1)[0])
    assert model[1].seen == [torch.float32]

    plain = nn.Sequential(nn.Linear(8, 8), RecordDtype(), nn.Linear(8, 2))
    Trainer(plain, torch.optim.SGD(plain.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
            precision="bf16", progress=False).step(batches(1)[0])
    assert plain[1].seen == [torch.bfloat16]


def test_keep_fp32_unknown_name_is_a_clear_error():
    model = nn.Sequential(nn.Linear(8, 2))
    with pytest.raises(ConfigError, match="not submodules"):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                precision="bf16", keep_fp32=["encoder.norm"])


def test_unknown_precision_and_unsupported_device_are_clear_errors():
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="not one of"):
        Trainer(model, opt, nn.CrossEntropyLoss(), device="cpu", precision="fp8")
    meta_model = nn.Linear(8, 2, device="meta")
    with pytest.raises(ConfigError, match="fp16"):
        Trainer(meta_model, torch.optim.SGD(meta_model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                device="meta", precision="fp16")
