"""engine/step.py on its own: one optimizer step over a window of micro-batches, without a Trainer.

The Trainer-level guarantees (bit-identical to a hand loop, accumulation equal to one big batch through
fit) are the behaviour suite tests/engine/test_engine_exactness.py; these pin the function itself.
"""

from __future__ import annotations

import torch
from torch import nn

from torchwork.engine.precision import resolve_precision
from torchwork.engine.step import LocalSync, StepSetup, optimizer_step


def _setup(model: nn.Module, **options) -> StepSetup:
    def loss_of(batch):
        inputs, targets = batch
        return nn.functional.mse_loss(model(inputs), targets), len(inputs)

    return StepSetup(torch.optim.SGD(model.parameters(), lr=0.1), resolve_precision("32", torch.device("cpu")),
                     LocalSync(), loss_of=loss_of, samples_in=lambda batch: len(batch[0]), **options)


def _batch(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 3, generator=generator), torch.randn(rows, 1, generator=generator)


def test_a_window_of_uneven_micro_batches_equals_one_batch_of_all_their_samples() -> None:
    torch.manual_seed(0)
    windowed, whole = nn.Linear(3, 1), nn.Linear(3, 1)
    whole.load_state_dict(windowed.state_dict())
    parts = [_batch(5, 1), _batch(2, 2), _batch(1, 3)]  # a short last micro-batch weighs 1/8, not 1/3
    joined = (torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]))

    with torch.no_grad():
        expected_loss = nn.functional.mse_loss(whole(joined[0]), joined[1])
    result = optimizer_step(_setup(windowed), parts)
    optimizer_step(_setup(whole), [joined])

    assert result.samples == 8 and result.smallest == 1 and result.stepped
    for a, b in zip(windowed.parameters(), whole.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    torch.testing.assert_close(result.loss, expected_loss, rtol=0, atol=1e-6)  # the window's sample mean


def test_stale_gradients_are_cleared_before_the_window() -> None:
    model = nn.Linear(3, 1)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e6)  # left by someone else's backward
    before = [p.detach().clone() for p in model.parameters()]
    optimizer_step(_setup(model), [_batch(4, 0)])
    assert all((a - b).abs().max() < 10 for a, b in zip(model.parameters(), before))


def test_clipping_logs_the_norm_before_clipping_and_the_scheduler_counts_steps() -> None:
    model = nn.Linear(3, 1)
    setup = _setup(model, clip_grad_norm=1e-3)
    setup.scheduler = torch.optim.lr_scheduler.StepLR(setup.optimizer, step_size=1, gamma=0.5)
    result = optimizer_step(setup, [_batch(4, 0), _batch(4, 1)])
    assert result.grad_norm is not None and float(result.grad_norm) > 1e-3  # the pre-clip norm
    assert setup.optimizer.param_groups[0]["lr"] == 0.05  # one window, one scheduler step
