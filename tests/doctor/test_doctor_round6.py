"""Issue 51, the third-party entry points (trl's SFT script, litgpt, pytorch/examples): what they showed.

- Activation checkpointing (``torch.utils.checkpoint``, transformers' ``gradient_checkpointing``) runs a
  layer's forward again inside ``backward()`` to rebuild what it did not keep. That forward's graph is
  never backpropagated by a ``backward()`` call of its own: it is not an evaluation.
- A slice passed to a function that accumulates into it (an output buffer, as in an online softmax) is
  written on purpose: the caller wrote the slice in the call.
- A cosine schedule litgpt sizes to a 6-step run reaches a rate of 0 inside the first epoch: sized to the
  run, not per-batch misuse (and a rate of 0 once stopped the script inside ``scheduler.step()``).
- The parameters of tensor parallelism are DTensors, with no storage of their own to read an address from.
- litgpt's ``finetune_adapter`` on a 2-layer model (adapters start at layer 2) freezes every parameter and
  stops in ``backward()``: the finding says that every parameter is frozen, not the whole list of causes.
- litgpt's adapters cache their prefix's keys and values on every forward, so after the no_grad sanity check
  the prefix never gets a gradient again (Lightning-AI/litgpt#1287): found, but blamed on the ``detach()``
  that ``state_dict()`` makes of every parameter at the checkpoint save, which cuts nothing.

Each case is a small script written to the test's folder and run as ``torchwork doctor`` runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from torchwork.doctor.runner import run_script

SRC = Path(__file__).resolve().parents[2] / "src"  # this checkout's torchwork, in the subprocess too
DoctorRun = Callable[[str], list[tuple[str, int | None]]]  # the doctor_findings fixture (conftest.py)

_CHECKPOINTED = """
import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Dropout(0.1))

    def forward(self, x):
        return x + checkpoint(self.inner, x, use_reentrant=REENTRANT)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), Block(), Block(), torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    optimizer.zero_grad()
    for micro in range(2):  # two micro-batches a step: two recomputations of each block per step
        x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
        (torch.nn.functional.cross_entropy(model(x), y) / 2).backward()
    optimizer.step()
"""

_LLAMA_CHECKPOINTED = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, use_cache=False)
model = LlamaForCausalLM(config)
model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    optimizer.zero_grad()
    for micro in range(2):
        ids = torch.randint(0, 50, (4, 16))
        (model(input_ids=ids, labels=ids).loss / 2).backward()
    optimizer.step()
"""

_OUT_SLICES = """
import torch


def accumulate(total, count, values):
    total.mul_(0.5).add_(values.sum(-1))
    count.add_(values.shape[-1])


torch.manual_seed(0)
values = torch.randn(12, 5)
totals, counts = torch.zeros(12), torch.zeros(12)
for start in range(0, 12, 4):
    accumulate(totals[start:start + 4], counts[start:start + 4], values[start:start + 4])
print(totals / counts)
"""

_VIEW_WRITTEN_HERE = """
import torch

torch.manual_seed(0)
scores = torch.randn(6, 3)
first = scores[:, 0]
first.clamp_(min=0)  # also changes scores
print(scores.sum())
"""


@pytest.mark.parametrize("reentrant", ["False", "True"])
def test_activation_checkpointing_recomputation_is_not_an_evaluation(doctor_findings: DoctorRun,
                                                                     reentrant: str) -> None:
    assert doctor_findings(_CHECKPOINTED.replace("REENTRANT", reentrant)) == []


def test_a_transformers_model_with_gradient_checkpointing_trains_without_a_finding(doctor_findings: DoctorRun) -> None:
    # its decoder layers are recomputed through their forward (not __call__): the attention runs at top level
    assert doctor_findings(_LLAMA_CHECKPOINTED) == []


def test_slices_passed_to_a_function_that_accumulates_into_them_are_not_noted(doctor_findings: DoctorRun) -> None:
    assert doctor_findings(_OUT_SLICES) == []


def test_a_view_held_and_written_where_it_was_made_is_still_noted(doctor_findings: DoctorRun) -> None:
    line = next(n for n, text in enumerate(textwrap.dedent(_VIEW_WRITTEN_HERE).splitlines(), 1) if "clamp_" in text)
    assert doctor_findings(_VIEW_WRITTEN_HERE) == [("view-mutation", line)]


_COSINE = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
loader = DataLoader(TensorDataset(torch.randn(256, 4), torch.randn(256, 1)), batch_size=8)  # 32 batches an epoch
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=LENGTH)
for step, (x, y) in enumerate(loader):
    if step == STOP:
        break
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    scheduler.step()
"""


def test_a_cosine_sized_to_a_run_shorter_than_an_epoch_is_silent(doctor_findings: DoctorRun) -> None:
    # max_steps=10 of a 32-batch epoch, the cosine over those 10 steps: its rate reaches 0, as meant
    assert doctor_findings(_COSINE.replace("LENGTH", "10").replace("STOP", "10")) == []


def test_a_cosine_that_ends_long_before_the_run_is_still_found(doctor_findings: DoctorRun) -> None:
    text = _COSINE.replace("LENGTH", "10").replace("STOP", "32")  # T_max=10 (epochs) stepped per batch
    line = next(n for n, t in enumerate(textwrap.dedent(text).splitlines(), 1) if "scheduler.step()" in t)
    assert doctor_findings(text) == [("scheduler-per-batch", line)]


_DTENSOR = """
import tempfile

import torch
import torch.distributed as dist
from torch.distributed.tensor import DeviceMesh, Replicate, distribute_tensor

store = tempfile.mktemp(prefix="doctor-store-")
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
mesh = DeviceMesh("cpu", [0])
torch.manual_seed(0)
weight = torch.nn.Parameter(distribute_tensor(torch.randn(4, 1), mesh, [Replicate()]))
optimizer = torch.optim.SGD([weight], lr=0.1)
for step in range(3):
    x = distribute_tensor(torch.randn(8, 4), mesh, [Replicate()])
    optimizer.zero_grad()
    (x @ weight).pow(2).mean().backward()
    optimizer.step()
dist.destroy_process_group()
"""


def test_dtensor_parameters_as_tensor_parallelism_makes_them_are_watched_without_an_error(tmp_path: Path) -> None:
    # pytorch/examples' tensor-parallel scripts: a DTensor has no storage of its own to read an address from.
    # A process of its own: a process group (and gloo's listening socket) is not for the test process to keep
    script = tmp_path / "tensor_parallel.py"
    script.write_text(textwrap.dedent(_DTENSOR), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "torchwork.cli", "doctor", "--json", str(script)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]  # 2 would be an error of the doctor's own
    assert json.loads(run.stdout)["findings"] == []


def test_a_reentrant_checkpoint_on_inputs_without_grad_is_named_as_the_cut(doctor_findings: DoctorRun) -> None:
    # the first block's input is the data itself: its checkpoint is never replayed, its layers never learn
    text = _CHECKPOINTED.replace("REENTRANT", "True").replace("model = torch.nn.Sequential(torch.nn.Linear(8, 8), ",
                                                              "model = torch.nn.Sequential(")
    line = next(n for n, t in enumerate(textwrap.dedent(text).splitlines(), 1) if "checkpoint(self.inner" in t)
    assert doctor_findings(text) == [("broken-graph", line)]


_FROZEN = """
import torch

model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
for parameter in model.parameters():
    parameter.requires_grad = SETTING
loss = model(torch.randn(3, 4)).DETACH.pow(2).mean()
loss.backward()
"""


def _findings(tmp_path: Path, text: str, exit: int = 1) -> list[tuple[str, int | None, str]]:
    """(check, line, message) of each finding of ``text`` run as ``torchwork doctor`` runs it, which ends
    with ``exit`` and no error of the doctor's own."""
    script = tmp_path / "train.py"
    script.write_text(text, encoding="utf-8")
    result = run_script(script)
    assert result.script_exit == exit and not result.internal_errors
    return [(f.id, f.line, f.message) for f in result.findings]


@pytest.mark.parametrize("wrap", ["", "model = torch.nn.DataParallel(model)"])
def test_backward_with_every_parameter_frozen_says_so_at_the_backward_line(tmp_path: Path, wrap: str) -> None:
    # a wrapper (DataParallel here, DDP or Lightning Fabric's module elsewhere) is named by the model it wraps
    text = _FROZEN.replace("SETTING", "False").replace(".DETACH", "").replace("\nloss =", f"\n{wrap}\nloss =")
    ((check, line, message),) = [f for f in _findings(tmp_path, text) if f[0] != "data-parallel"]
    assert (check, line) == ("broken-graph", 9)
    assert "no parameter of Sequential requires grad (all 4 parameter tensors are frozen)" in message


def test_a_detached_loss_of_a_trainable_model_keeps_the_general_explanation(tmp_path: Path) -> None:
    ((check, line, message),) = _findings(tmp_path, _FROZEN.replace("SETTING", "True").replace("DETACH", "detach()"))
    assert (check, line) == ("broken-graph", 8)
    assert "frozen" not in message and "The loss has no autograd history" in message


_CACHED_PREFIX = """
import io

import torch


class Prefixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.prefix = torch.nn.Parameter(torch.randn(2, 4))
        self.body = torch.nn.Linear(4, 4)
        self.cache = None  # the prefix's projection, computed once and kept

    def forward(self, x):
        if self.cache is None:
            self.cache = self.prefix.tanh()
        return self.body(x) + self.cache.sum(0)


model = Prefixed()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with torch.no_grad():
    model(torch.randn(3, 4))  # a sanity check before training fills the cache with no graph
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(3, 4)).pow(2).mean().backward()
    optimizer.step()  # line: step
    torch.save(model.state_dict(), io.BytesIO())
"""


def test_a_prefix_reused_from_a_no_grad_cache_is_not_blamed_on_state_dict(tmp_path: Path) -> None:
    ((check, line, message),) = _findings(tmp_path, _CACHED_PREFIX, exit=0)
    step_line = next(n for n, t in enumerate(_CACHED_PREFIX.splitlines(), 1) if "# line: step" in t)
    assert (check, line) == ("broken-graph", step_line)  # not the torch.save line below it
    assert "Prefixed.prefix" in message and "reused from a cache" in message
