"""Gradual unfreezing: by identity, with the planned lr, a consistent scheduler, and exact resume after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.errors import ConfigError
from torchwork.finetune import GradualUnfreezing, freeze, param_groups

SCRIPT = Path(__file__).with_name("unfreeze_script.py")
STEPS_PER_EPOCH = 6  # 96 samples / batch 16


def run_script(run_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(run_dir), str(out), *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("uninterrupted")
    done = run_script(root / "runs", root / "final.pt")
    assert done.returncode == 0, done.stderr
    return torch.load(root / "final.pt", weights_only=True)


# Killed in epoch 1 (block 1 already unfrozen, mid-epoch) and in epoch 2 (everything unfrozen).
@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [8, 14])
def test_gradual_unfreezing_killed_mid_run_and_resumed_equals_the_uninterrupted_run(tmp_path, uninterrupted,
                                                                                     kill_at):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    killed = run_script(runs, out, "--kill-at", str(kill_at))
    assert killed.returncode == -signal.SIGKILL
    resumed = run_script(runs, out)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    result = torch.load(out, weights_only=True)
    for key, value in uninterrupted["model"].items():
        assert torch.equal(result["model"][key], value), f"{key} differs after resume"
    assert result["frozen"] == uninterrupted["frozen"]
    assert result["groups"] == uninterrupted["groups"] and result["lrs"] == uninterrupted["lrs"]
    assert [h["train_loss"] for h in result["history"]] == [h["train_loss"] for h in uninterrupted["history"]]


@pytest.fixture(scope="module")
def uninterrupted_house_loader(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("house")
    done = run_script(root / "runs", root / "final.pt", "--house-loader")
    assert done.returncode == 0, done.stderr
    return torch.load(root / "final.pt", weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize(("kill_at", "resumed_from"), [(8, "step 6, after epoch 1"), (10, "step 9, epoch 2, after batch 3")])
def test_resume_with_a_loader_that_owns_its_generator(tmp_path, uninterrupted_house_loader, kill_at, resumed_from):
    # torchwork.data.loader shuffles with its own seeded generator: its state must survive the checkpoint
    # written at the end of epoch 0 (else epoch 1 replays epoch 0's order), and a mid-epoch resume must
    # leave it in step for the epochs after.
    expected = uninterrupted_house_loader
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    assert run_script(runs, out, "--house-loader", "--kill-at", str(kill_at)).returncode == -signal.SIGKILL
    resumed = run_script(runs, out, "--house-loader")
    assert f"({resumed_from})" in resumed.stderr, resumed.stderr[-2000:]
    result = torch.load(out, weights_only=True)
    assert [h["train_loss"] for h in result["history"]] == [h["train_loss"] for h in expected["history"]]
    for key, value in expected["model"].items():
        assert torch.equal(result["model"][key], value), f"{key} differs after resume"


def test_the_uninterrupted_run_unfroze_on_schedule(uninterrupted):
    assert all(uninterrupted["frozen"].values())  # everything trainable at the end
    assert len(uninterrupted["groups"]) == 8  # head, then blocks.1, then stem and blocks.0 (weights + no-decay)


class Twins(nn.Module):
    """Two layers with equal values: matching by value (Lightning's BackboneFinetuning) confuses them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)
        with torch.no_grad():
            self.b.weight.copy_(self.a.weight)
            self.b.bias.copy_(self.a.bias)

    def forward(self, x):
        return self.head(self.b(torch.relu(self.a(x))))


def test_a_layer_equal_to_another_is_added_by_identity_and_trains():
    torch.manual_seed(0)
    model = Twins()
    freeze(model, "a", "b")
    plan = param_groups(model, lr=0.05, head="head", layers=["a", "b"], layer_decay=0.5)
    optimizer = torch.optim.SGD(plan)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9 ** step)
    unfreezing = GradualUnfreezing(optimizer, plan, {1: "b"}, scheduler=scheduler)
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    b_before, a_before = model.b.weight.clone(), model.a.weight.clone()
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", progress=False,
                      callbacks=[unfreezing])
    trainer.fit([(x[:16], y[:16]), (x[16:], y[16:])], epochs=3)
    held = [p for g in optimizer.param_groups for p in g["params"]]
    assert any(p is model.b.weight for p in held) and not any(p is model.a.weight for p in held)
    assert not torch.equal(model.b.weight, b_before) and torch.equal(model.a.weight, a_before)
    # the new group joined the schedule at its planned lr (0.05 * 0.5 for layer b below the head)
    head_group = optimizer.param_groups[0]
    b_group = next(g for g in optimizer.param_groups if any(p is model.b.weight for p in g["params"]))
    assert b_group["initial_lr"] == pytest.approx(0.025)
    assert b_group["lr"] / b_group["initial_lr"] == pytest.approx(head_group["lr"] / head_group["initial_lr"])
    assert len(scheduler.base_lrs) == len(optimizer.param_groups) == len(scheduler.lr_lambdas)


def test_bad_settings_are_refused():
    model = Twins()
    plan = param_groups(model, lr=0.1)
    optimizer = torch.optim.SGD(plan)
    with pytest.raises(ConfigError, match="epoch numbers"):
        GradualUnfreezing(optimizer, plan, {-1: "a"})
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(ConfigError, match="ReduceLROnPlateau"):
        GradualUnfreezing(optimizer, plan, {1: "a"}, scheduler=plateau)
    # a misspelt name is refused when the schedule is built, not at its epoch hours into training
    with pytest.raises(ConfigError, match=r"schedule\[5\]: \['encoder'\] name no parameter of the model"):
        GradualUnfreezing(optimizer, plan, {1: "a", 5: "encoder"})
