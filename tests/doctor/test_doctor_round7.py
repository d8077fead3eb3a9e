"""Issue 51, LLaMA-Factory's entry points: what they showed.

- Its reward-model stage wraps the language model in trl's ``AutoModelForCausalLMWithValueHead``, whose
  ``post_init`` offers the value head the whole language model's ``state_dict()`` with ``strict=False``, to pick
  up ``v_head.*`` keys if there are any. With none, nothing loads and the head keeps its fresh initialisation, as
  meant. "Loaded nothing" is a mistake when a checkpoint was read for it, or when the keys are the model's
  under another prefix; an unrelated state dict built in the process is a deliberate "take what fits".
- pytorch/tutorials' polynomial fits sum their loss over 2,000 points (``MSELoss(reduction='sum')``), so the
  gradient norm starts near 1e5 and falls while RMSprop (or SGD at 1e-6) converges. A norm over the absolute
  limit is exploding once it is also 10x the run's first norms: a large scale from the first step is the
  script's own.
- pytorch/tutorials' NLP scripts show what a model does on a few examples, outside ``no_grad``: an LSTM fed
  5 one-row steps, 3 sentences scored before and after training. Graphs of a handful of rows, freed at once,
  are not worth an ``inference-grad`` finding; a test loop over a batch's worth of rows still is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork.doctor.session import diagnose

DoctorRun = Callable[[str], list[tuple[str, int | None]]]  # the doctor_findings fixture (conftest.py)


def _language_model() -> nn.Module:
    return nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 8), nn.Linear(8, 20))


class ValueHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.summary = nn.Linear(8, 1)


def test_a_head_offered_another_models_live_state_dict_is_silent() -> None:
    head = ValueHead()
    with diagnose(["state-dict-mismatch"]) as session:
        head.load_state_dict(_language_model().state_dict(), strict=False)
    assert session.findings == []


def test_the_same_unrelated_keys_read_from_a_file_are_found(tmp_path: Path) -> None:
    torch.save(_language_model().state_dict(), tmp_path / "model.pt")
    head = ValueHead()
    with diagnose(["state-dict-mismatch"]) as session:
        saved = torch.load(tmp_path / "model.pt", weights_only=True)
        head.load_state_dict({k: v for k, v in saved.items() if k.startswith("2.")}, strict=False)
    assert [f.id for f in session.findings] == ["state-dict-mismatch"]
    assert "loaded nothing" in session.findings[0].message


def test_a_live_state_dict_under_a_wrappers_prefix_is_still_found() -> None:
    model = _language_model()
    wrapped = {"module." + k: v for k, v in _language_model().state_dict().items()}  # as DDP's state_dict() has it
    with diagnose(["state-dict-mismatch"]) as session:
        model.load_state_dict(wrapped, strict=False)
    assert [f.id for f in session.findings] == ["state-dict-mismatch"]
    assert "'module.'" in session.findings[0].message


def _fit(optimizer_of: type[torch.optim.Optimizer], lr: float, grow: bool = False) -> list[str]:
    """A cubic fit to sin(x) with a summed loss, as the tutorials write it: the checks' findings."""
    torch.manual_seed(0)
    x = torch.linspace(-3.14, 3.14, 2000)
    features, target = x.unsqueeze(-1).pow(torch.tensor([1, 2, 3])), torch.sin(x)
    model = nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))
    optimizer = optimizer_of(model.parameters(), lr=lr)
    with diagnose(["exploding-gradients", "non-finite-loss"]) as session:
        for step in range(60):
            scale = 10.0 ** (step // 10) if grow else 1.0  # inputs 10x larger every 10 steps
            loss = nn.functional.mse_loss(model(features * scale), target, reduction="sum")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return [f.id for f in session.findings]


def test_a_summed_loss_whose_large_norm_falls_is_no_explosion() -> None:
    assert _fit(torch.optim.RMSprop, 1e-3) == []
    assert _fit(torch.optim.SGD, 1e-7) == []


def test_a_norm_that_climbs_far_over_its_start_is_still_found() -> None:
    assert _fit(torch.optim.RMSprop, 1e-3, grow=True) == ["exploding-gradients"]


_EXAMPLES = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.LogSoftmax(dim=1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [(torch.randn(1, 6), torch.randint(0, 3, (1,))) for _ in range(8)]
for example, _ in data[:EXAMPLES]:
    print(model(example))  # what the untrained model says
for epoch in range(5):
    for x, y in data:
        optimizer.zero_grad()
        nn.functional.nll_loss(model(x), y).backward()
        optimizer.step()
"""


@pytest.mark.parametrize("examples", [3, 8])
def test_a_few_example_predictions_outside_no_grad_are_no_finding(doctor_findings: DoctorRun, examples: int) -> None:
    assert doctor_findings(_EXAMPLES.replace("EXAMPLES", str(examples))) == []


def test_a_test_loop_over_a_batchs_worth_of_rows_outside_no_grad_is_still_found(doctor_findings: DoctorRun) -> None:
    text = _EXAMPLES.replace("EXAMPLES", "8") + """
test = [torch.randn(1, 6) for _ in range(80)]
predictions = [model(x).argmax(1) for x in test]  # 80 one-row forwards, each graph kept for nothing
"""
    line = text.splitlines().index("predictions = [model(x).argmax(1) for x in test]  # 80 one-row forwards, "
                                   "each graph kept for nothing") + 1
    assert doctor_findings(text) == [("inference-grad", line)]
