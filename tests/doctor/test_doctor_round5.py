"""Issue 51's last misses: a per-batch StepLR on short epochs, and `eval-mode` beside a GAN's planted bugs.

Each case is a small script written to the test's folder and run as ``torchwork doctor`` runs it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest

DoctorRun = Callable[[str], list[tuple[str, int | None]]]  # the doctor_findings fixture (conftest.py)

_SCHEDULE = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)  # 4 batches an epoch
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=STEP_SIZE, gamma=0.7)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        PER_BATCH
    PER_EPOCH
"""


def _line(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(textwrap.dedent(text).splitlines(), start=1) if needle in line)


def test_step_lr_stepped_per_batch_on_four_batch_epochs_is_found(doctor_findings: DoctorRun) -> None:
    # 8 calls of StepLR(1, 0.7): the rate falls 17x, never 100x within the first (4-batch) epoch
    text = _SCHEDULE.replace("STEP_SIZE", "1").replace("PER_BATCH", "scheduler.step()").replace("PER_EPOCH", "pass")
    assert doctor_findings(text) == [("scheduler-per-batch", _line(text, "        scheduler.step()"))]


@pytest.mark.parametrize(("step_size", "per_batch", "per_epoch"), [
    ("1", "pass", "scheduler.step()"),  # the schedule as meant: once an epoch
    ("3", "scheduler.step()", "pass"),  # a unit of most of an epoch, stepped per batch: sized in steps, 2 falls
])
def test_step_lr_as_meant_is_silent(doctor_findings: DoctorRun, step_size: str, per_batch: str,
                                    per_epoch: str) -> None:
    text = _SCHEDULE.replace("STEP_SIZE", step_size).replace("PER_BATCH", per_batch).replace("PER_EPOCH", per_epoch)
    assert doctor_findings(text) == []


_GAN = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 6), nn.Tanh())
discriminator = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid(), nn.Flatten(0))
images = DataLoader(TensorDataset(torch.rand(ROWS, 6)), batch_size=4, shuffle=True)
bce = nn.BCELoss()
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4)
fixed_noise = torch.randn(4, 4)
for epoch in range(2):
    for i, (real,) in enumerate(images):
        n = real.shape[0]
        discriminator.zero_grad()
        loss_real = bce(discriminator(real), torch.ones(n))
        loss_real.backward()
        fakes = generator(torch.randn(n, 4))
        loss_fake = bce(discriminator(fakes.detach()), torch.zeros(n))
        loss_fake.backward()
        opt_d.step()
        generator.zero_grad()
        loss_g = bce(discriminator(GENERATED), torch.ones(n))
        loss_g.backward()
        opt_g.step()
        if i % 2 == 0:
            preview = generator(fixed_noise)  # drawn in training mode, as the dcgan example does
"""


def test_a_detached_generator_step_is_broken_graph_not_eval_mode(doctor_findings: DoctorRun) -> None:
    # the generator's training forward (never backpropagated: detached) beside its preview, between the same
    # two optimizer steps: two lines once each, not an evaluation loop
    text = _GAN.replace("ROWS", "16").replace("GENERATED", "fakes.detach()")
    found = doctor_findings(text)
    assert ("broken-graph", _line(text, "loss_g = bce(")) in found
    assert [check for check, _ in found if check == "eval-mode"] == []


def test_a_preview_after_the_last_step_is_not_an_evaluation(doctor_findings: DoctorRun) -> None:
    # 20 rows in batches of 4: five iterations an epoch, so the preview (every other iteration) runs after
    # the last optimizer step; its line ran once inside the training steps before (with 33 images in
    # batches of 8, the seeded GAN's batch of one, the same happens)
    text = _GAN.replace("ROWS", "20").replace("GENERATED", "fakes")
    assert doctor_findings(text) == []


def test_a_single_no_grad_test_after_the_last_step_is_still_an_evaluation(doctor_findings: DoctorRun) -> None:
    text = """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for epoch in range(2):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            test_loss = torch.nn.functional.mse_loss(model(x), y)
    """
    assert doctor_findings(text) == [("eval-mode", _line(text, "test_loss ="))]


_FITTED_LINE = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1, 8), {middle}nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn({rows}, 1)
y = 2 * x + 1
for epoch in range(3):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
predicted = model(x).detach()
"""


@pytest.mark.parametrize(("rows", "middle", "expected"), [
    (15, "nn.ReLU(), ", []),  # a fitted line for a plot: a graph of 15 rows for a moment
    (64, "nn.ReLU(), ", ["inference-grad"]),  # a final test on a batch's worth of rows
    (15, "nn.Dropout(0.5), ", ["eval-mode"]),  # dropout still on when it predicts: its mode matters
])
def test_one_forward_after_training_is_a_finding_from_a_batch_of_rows_or_in_training_mode(
        doctor_findings: DoctorRun, rows: int, middle: str, expected: list[str]) -> None:
    text = _FITTED_LINE.format(rows=rows, middle=middle)
    assert doctor_findings(text) == [(check, _line(text, "predicted =")) for check in expected]
