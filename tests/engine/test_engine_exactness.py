"""The engine matches a hand-written loop bit for bit, and accumulation is exact."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer


def make_data(n: int = 200, features: int = 10, classes: int = 3, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return TensorDataset(x, y)


def make_model(seed: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))


def test_fp32_fit_is_bit_identical_to_a_hand_loop():
    dataset = make_data()

    def loader() -> DataLoader:
        return DataLoader(dataset, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(7))

    # hand-written loop
    hand = make_model()
    opt = torch.optim.AdamW(hand.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    torch.manual_seed(123)
    hand.train()
    for x, y in loader():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(hand(x), y)
        loss.backward()
        opt.step()

    model = make_model()
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-2), nn.CrossEntropyLoss(),
                      device="cpu", progress=False)
    torch.manual_seed(123)
    trainer.fit(loader(), epochs=1)

    for (name, a), b in zip(hand.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name


def _sgd_trainer(model: nn.Module, accumulate: int) -> Trainer:
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), nn.CrossEntropyLoss(), device="cpu",
                   accumulate=accumulate, progress=False)


def _no_dropout_model() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3)).double()


@pytest.mark.parametrize("micro_sizes", [
    [8, 8, 8, 8, 8, 8],        # windows of 4 and a short tail window of 2 (of 4)
    [8, 8, 8, 8, 8, 5],        # ... whose last micro-batch is also short
    [8, 8, 8, 8, 8, 8, 8, 8],  # two full windows
])
def test_accumulation_equals_one_big_batch(micro_sizes):
    dataset = make_data(n=sum(micro_sizes))
    x, y = dataset.tensors
    x = x.double()
    micro, start = [], 0
    for size in micro_sizes:
        micro.append((x[start:start + size], y[start:start + size]))
        start += size
    windows = [micro[i:i + 4] for i in range(0, len(micro), 4)]
    big = [(torch.cat([m[0] for m in w]), torch.cat([m[1] for m in w])) for w in windows]

    accumulated, reference = _no_dropout_model(), _no_dropout_model()
    history = _sgd_trainer(accumulated, 4).fit(micro, epochs=1)
    _sgd_trainer(reference, 1).fit(big, epochs=1)

    assert history[0]["steps"] == len(windows)
    for a, b in zip(accumulated.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_accumulation_step_api_matches_fit():
    x, y = make_data(n=40).tensors
    micro = [(x[i:i + 10].double(), y[i:i + 10]) for i in range(0, 40, 10)]
    a, b = _no_dropout_model(), _no_dropout_model()
    _sgd_trainer(a, 2).fit(micro, epochs=1)
    trainer = _sgd_trainer(b, 1)
    trainer.step(*micro[:2])
    trainer.step(*micro[2:])
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_scheduler_counts_optimizer_steps_not_micro_batches():
    model = _no_dropout_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = make_data(n=48).tensors
    micro = [(x[i:i + 8].double(), y[i:i + 8]) for i in range(0, 48, 8)]  # 6 micro -> 2 windows of 3
    trainer = Trainer(model, opt, nn.CrossEntropyLoss(), sched, device="cpu", accumulate=3, progress=False,
                      scheduler_interval="step")  # per step, as asked (auto: StepLR counts epochs)
    history = trainer.fit(micro, epochs=1)
    assert history[0]["steps"] == 2 and trainer.global_step == 2
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)


def test_same_seed_same_weights_twice():
    def run() -> dict:
        model = make_model()
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(),
                          device="cpu", progress=False)
        torch.manual_seed(0)
        trainer.fit(DataLoader(make_data(), batch_size=32, shuffle=True), epochs=2)
        return copy.deepcopy(model.state_dict())

    first, second = run(), run()
    assert all(torch.equal(first[k], second[k]) for k in first)
