"""Host syncs per step: the default Trainer (AdamW, clipping, guard on) reads nothing from the device on
the steps that do not log, beyond what a hand-written loop doing the same work reads."""

from __future__ import annotations

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from torchwork import Trainer

_SYNCS = {torch.Tensor.item, torch.Tensor.__float__, torch.Tensor.__bool__, torch.Tensor.__int__,
          torch.Tensor.tolist, torch.Tensor.cpu}
STEPS, LOG_EVERY = 12, 5


class SyncCounter(TorchFunctionMode):
    """Counts the calls that copy a tensor's value to the host (a device sync on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _SYNCS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(16, 8, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(STEPS)]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _per_step(counter: SyncCounter, batches: list) -> tuple[list, list[int]]:
    """A loader that records the sync count each time the loop asks for the next batch."""
    marks: list[int] = []

    def loader():
        for batch in batches:
            marks.append(counter.count)
            yield batch
        marks.append(counter.count)

    return loader(), marks


def _hand_loop_syncs() -> list[int]:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    with SyncCounter() as counter:
        loader, marks = _per_step(counter, _batches())
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    return [b - a for a, b in zip(marks, marks[1:])]


def _trainer_syncs() -> list[int]:
    model = _model()
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(),
                      device="cpu", progress=False, clip_grad_norm=1.0, log_every_n_steps=LOG_EVERY,
                      loggers=[_Keep()])
    assert trainer.guard is not None
    with SyncCounter() as counter:
        loader, marks = _per_step(counter, _batches())
        trainer.fit(_Sized(loader, STEPS), epochs=1)
    return [b - a for a, b in zip(marks, marks[1:])]


class _Keep:
    def __init__(self) -> None:
        self.logged: list[dict] = []

    def log(self, metrics: dict, step: int) -> None:
        self.logged.append(metrics)


class _Sized:
    def __init__(self, iterator, length: int) -> None:
        self.iterator, self.length = iterator, length

    def __iter__(self):
        return self.iterator

    def __len__(self) -> int:
        return self.length


def test_the_counter_sees_host_syncs() -> None:
    with SyncCounter() as counter:
        t = torch.ones(3)
        float(t.sum()), t.sum().item(), bool(t.all()), t.tolist(), t.cpu()
    assert counter.count == 5


def test_no_extra_host_sync_on_steps_that_do_not_log() -> None:
    hand, trainer = _hand_loop_syncs(), _trainer_syncs()
    assert len(hand) == len(trainer) == STEPS
    for step, (h, t) in enumerate(zip(hand, trainer), start=1):
        if step % LOG_EVERY:
            assert t == h, f"step {step}: the Trainer made {t} host syncs, the hand loop {h}"
    logging_steps = [t - h for step, (h, t) in enumerate(zip(hand, trainer), start=1) if step % LOG_EVERY == 0]
    assert all(extra > 0 for extra in logging_steps)  # logging steps do read the loss (the counter works)
