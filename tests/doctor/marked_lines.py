"""What the doctor's tests share: the lines they mark with ``# line: NAME`` (an assertion names a line
without counting it), and an L-BFGS run, whose closure clears and backpropagates inside ``step()``."""

from __future__ import annotations

import torch
from torch import nn


def marked_line(path: str, marker: str) -> int:
    """The number of the line of ``path`` that ends with ``# line: <marker>``."""
    with open(path, encoding="utf-8") as source:
        for number, line in enumerate(source, start=1):
            if line.rstrip().endswith(f"# line: {marker}"):
                return number
    raise AssertionError(f"no line of {path} ends with '# line: {marker}'")


def lbfgs_steps(steps: int = 3) -> None:
    """``steps`` L-BFGS steps of a linear model; each runs a closure that calls zero_grad and backward."""
    model = nn.Linear(4, 1)
    lbfgs = torch.optim.LBFGS(model.parameters(), max_iter=4)
    x = torch.randn(8, 4)

    def closure() -> torch.Tensor:
        lbfgs.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        lbfgs.step(closure)
