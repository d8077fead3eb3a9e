"""accumulation-not-averaged: micro-batch mean losses added up by gradient accumulation, at the backward
line; losses divided or normalised, several losses from different lines, the heads of a multi-task loop, a
closure and a disabled GradScaler are not found."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from marked_lines import lbfgs_steps, marked_line
from torch import nn

from torchwork.doctor.session import diagnose

CHECK = "accumulation-not-averaged"


def _lineno(marker: str) -> int:
    return marked_line(__file__, marker)


def _windows(loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], optimizer_class: type = torch.optim.SGD,
             k: int = 3, scaler: torch.amp.GradScaler | None = None) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = optimizer_class(model.parameters(), lr=0.01)
    optimizer.zero_grad()
    for i in range(3 * k):
        loss = loss_of(model(torch.randn(8, 4)), torch.randint(0, 3, (8,)))
        if scaler is None:
            loss.backward()  # line: backward
        else:
            scaler.scale(loss).backward()  # line: scaled backward
        if (i + 1) % k == 0:
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad()


def test_mean_losses_added_up_are_found_at_the_backward_line() -> None:
    with diagnose() as session:
        _windows(nn.functional.cross_entropy)
    (finding,) = session.find(CHECK)
    assert finding.line == _lineno("backward") and finding.severity == "warning"
    assert "gradients of 3 backward passes" in finding.message and "(NllLossBackward0)" in finding.message
    assert "SGD moved 3x as far" in finding.message and "(loss / 3).backward()" in finding.fix


def test_a_mean_seen_through_an_enabled_grad_scaler_is_found() -> None:
    with diagnose() as session:
        _windows(lambda out, y: (out - y[:, None]).pow(2).mean(), torch.optim.AdamW, k=2,
                 scaler=torch.amp.GradScaler("cpu"))
    (finding,) = session.find(CHECK)
    assert finding.line == _lineno("scaled backward")
    assert "(MeanBackward0) not divided by 2" in finding.message
    assert "AdamW divides most of that scale out (all but eps)" in finding.message


@pytest.mark.parametrize("loss_of", [
    lambda out, y: nn.functional.cross_entropy(out, y) / 3,
    lambda out, y: nn.functional.cross_entropy(out, y) * (1 / 3),
    lambda out, y: nn.functional.cross_entropy(out, y, reduction="sum") / 24,  # normalised by the window's rows
    lambda out, y: nn.functional.cross_entropy(out, y, reduction="sum"),
], ids=["divided", "multiplied", "normalised", "summed"])
def test_a_divided_normalised_or_summed_loss_is_not_found(loss_of) -> None:
    with diagnose() as session:
        _windows(loss_of)
        # a disabled scaler hands the divided loss back unchanged: nothing to look through
        _windows(loss_of, scaler=torch.amp.GradScaler("cpu", enabled=False))
    assert session.find(CHECK) == [], session.findings


def test_losses_from_other_lines_heads_of_a_loop_and_a_closure_are_not_found() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        trunk, heads = nn.Linear(4, 4), nn.ModuleList(nn.Linear(4, 2) for _ in range(3))
        optimizer = torch.optim.SGD([*trunk.parameters(), *heads.parameters()], lr=0.01)
        for _ in range(3):  # a multi-task loop: one backward per head, from one line, reaching different heads
            optimizer.zero_grad()
            features = trunk(torch.randn(8, 4))
            for head in heads:
                nn.functional.cross_entropy(head(features), torch.randint(0, 2, (8,))).backward(retain_graph=True)
            optimizer.step()
        disc = nn.Linear(2, 1)
        opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
        for _ in range(3):  # two halves of one loss, each backpropagated from its own line
            opt_d.zero_grad()
            disc(torch.randn(4, 2)).mean().backward()
            (-disc(torch.randn(4, 2))).mean().backward()
            opt_d.step()
        lbfgs_steps()
    assert session.find(CHECK) == [], session.findings


def test_gradients_cleared_between_the_passes_are_not_a_window() -> None:
    torch.manual_seed(0)
    with diagnose() as session:
        model = nn.Linear(4, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(9):  # a step skipped every other batch, but the gradients cleared every batch
            optimizer.zero_grad(set_to_none=i % 2 == 0)
            nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 3, (8,))).backward()
            if i % 2:
                optimizer.step()
    assert session.find(CHECK) == [], session.findings
