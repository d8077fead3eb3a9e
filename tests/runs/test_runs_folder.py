"""Seeding, the manifest, checkpoints on disk and `torchwork resume`."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from torchwork import Trainer, seed_everything
from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import (
    CheckpointManager,
    clean_state_dict,
    load_checkpoint,
    save_checkpoint,
    unwrap_model,
)

SCRIPT = Path(__file__).with_name("resume_script.py")


def test_seed_everything_seeds_python_numpy_and_torch():
    def draw():
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    seed_everything(11)
    first = draw()
    seed_everything(11)
    assert draw() == first
    seed_everything(12)
    assert draw() != first


@pytest.mark.parametrize(("arguments", "message"), [
    ((10**5000,), r"seed=<an integer of 5001 digits or so> must be an integer in \[0, 2\*\*63\)"),  # ValueError
    ((True,), r"seed=True must be an integer"),
    ((3, 1), r"deterministic=1: pass True or False"),  # 1 was taken, and turned the flags on
], ids=["seed-5001-digits", "seed-bool", "deterministic-int"])
def test_seed_everything_refuses_what_is_no_seed_before_seeding(arguments, message):
    from torchwork.errors import ConfigError

    before = torch.are_deterministic_algorithms_enabled()
    with pytest.raises(ConfigError, match=message):
        seed_everything(*arguments)
    assert torch.are_deterministic_algorithms_enabled() == before


def test_integer_scalars_of_numpy_and_torch_are_seeds_like_the_int():
    """np.int64(5) was refused by the commands' check and made random.seed raise TypeError (3.11 takes an int,
    not numpy's scalar); a seed from a numpy array or a tensor now seeds exactly as the plain int does."""
    from torchwork.seeding import check_seed

    seed_everything(5)
    plain = random.random(), float(np.random.rand()), float(torch.rand(1))
    for scalar in (np.int64(5), np.uint32(5), torch.tensor(5)):
        assert seed_everything(scalar) == 5 and type(seed_everything(scalar)) is int
        assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == plain
        assert check_seed(scalar) == 5 and type(check_seed(scalar)) is int


@pytest.mark.parametrize("seed", [np.int64(-1), np.bool_(True), 2.0, np.float64(3.0)], ids=str)
def test_check_seed_still_refuses_what_is_no_whole_seed(seed):
    from torchwork.errors import ConfigError
    from torchwork.seeding import check_seed

    with pytest.raises(ConfigError, match=r"^seed="):
        check_seed(seed)


def test_seed_everything_deterministic_sets_the_flags(capsys):
    before = torch.are_deterministic_algorithms_enabled()
    try:
        seed_everything(3, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        assert "cost in speed" in capsys.readouterr().err
    finally:
        torch.use_deterministic_algorithms(before)
        torch.backends.cudnn.deterministic = False


def tiny_run(tmp_path: Path, **kwargs) -> Trainer:
    seed_everything(5)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    model[0].weight.requires_grad_(False)
    data = [(torch.randn(10, 6), torch.randint(0, 2, (10,))) for _ in range(4)]
    trainer = Trainer(model, torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1),
                      nn.CrossEntropyLoss(), device="cpu", run_dir=tmp_path / "runs", progress=False,
                      config={"lr": 0.1}, **kwargs)
    trainer.fit(data, val_loader=data[:2], epochs=2)
    return trainer


def test_manifest_fields_are_present_and_true(tmp_path, capsys):
    trainer = tiny_run(tmp_path)
    run = trainer.run_path
    assert run.parent == tmp_path / "runs" and run.name[:8].isdigit()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["model"]["parameters"] == {"total": 6 * 8 + 8 + 8 * 2 + 2, "trainable": 8 + 8 * 2 + 2}
    assert "Linear(in_features=6" in manifest["model"]["structure"]
    assert manifest["seed"] == 5
    assert manifest["data"]["train_size"] == 4 and manifest["data"]["validation_size"] == 2
    assert manifest["optimizer"]["class"] == "SGD" and manifest["optimizer"]["param_groups"][0]["lr"] == 0.1
    assert manifest["training"]["precision"] == "32" and manifest["training"]["accumulate"] == 1
    assert manifest["config"] == {"lr": 0.1}
    assert manifest["command"]["argv"] == sys.argv
    assert manifest["versions"]["torch"] == torch.__version__
    assert manifest["world_size"] == 1 and manifest["host"]["hostname"]
    assert {"commit", "dirty"} <= set(manifest["git"])  # and, when dirty, the patch (test_runs_record.py)
    assert "26 trainable" in capsys.readouterr().err  # the summary printed at the start
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if "train_loss" in r] == [1, 2]
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))


def test_checkpoint_loads_with_plain_pytorch_and_has_every_part(tmp_path):
    trainer = tiny_run(tmp_path)
    checkpoints = CheckpointManager(trainer.run_path / "checkpoints").step_checkpoints()
    assert [p.name for p in checkpoints] == ["step-000000004.pt", "step-000000008.pt"]
    state = torch.load(checkpoints[-1], weights_only=True)  # what the README shows
    assert set(state) >= {"model", "optimizer", "scheduler", "scaler", "rng", "counters", "format_version"}
    assert set(state["rng"]) == {"python", "numpy", "torch", "cuda"}
    assert state["counters"] == {"global_step": 8, "skipped_steps": 0, "epoch": 2, "batch_in_epoch": 0}
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    model.load_state_dict(state["model"])
    assert torch.equal(model[2].weight, trainer.model[2].weight)
    assert (trainer.run_path / "checkpoints" / "best.pt").exists()
    best = json.loads((trainer.run_path / "checkpoints" / "best.json").read_text())
    assert best["monitor"] == "val_loss"


def test_keep_last_k_checkpoints(tmp_path):
    trainer = tiny_run(tmp_path, checkpoint_every_n_steps=1, keep_checkpoints=2)
    names = [p.name for p in CheckpointManager(trainer.run_path / "checkpoints").step_checkpoints()]
    assert names == ["step-000000007.pt", "step-000000008.pt"]


def test_wrapper_prefixes_are_stripped():
    model = nn.Linear(2, 2)
    compiled_like = nn.Module()
    compiled_like._orig_mod = model
    assert unwrap_model(compiled_like) is model
    assert list(clean_state_dict({"module._orig_mod.weight": 1, "bias": 2})) == ["weight", "bias"]


def test_corrupt_and_foreign_checkpoints_are_refused(tmp_path):
    path = tmp_path / "step-000000001.pt"
    save_checkpoint({"format_version": 1, "model": {"w": torch.ones(1)}}, path)
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="NaN"):
        save_checkpoint({"format_version": 1, "model": {"w": torch.tensor([float("nan")])}}, tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_checkpoint_is_streamed_to_disk_not_copied_in_memory(tmp_path):
    import hashlib
    import tracemalloc

    weights = torch.randn(1000, 1000)  # 4 MB
    path = tmp_path / "step-000000001.pt"
    tracemalloc.start()
    try:
        save_checkpoint({"format_version": 1, "model": {"w": weights}}, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak  # written through a BytesIO it was the file's size twice: 8 MB
    recorded = (tmp_path / "step-000000001.pt.sha256").read_text().split()[0]
    assert recorded == hashlib.sha256(path.read_bytes()).hexdigest()
    assert torch.equal(load_checkpoint(path)["model"]["w"], weights)


def test_the_free_space_check_counts_each_storage_once(tmp_path):
    from torchwork.runs.checkpoint import tensor_bytes

    tied = torch.randn(256, 64)  # an embedding and a decoder sharing one weight: saved once
    state = {"format_version": 1, "model": {"embed": tied, "decoder": tied, "row": tied[0]}}
    path = tmp_path / "step-000000001.pt"
    save_checkpoint(state, path)
    assert tensor_bytes(state) == tied.nelement() * tied.element_size() <= path.stat().st_size


def test_resume_latest_with_no_runs_is_a_fresh_start(tmp_path):
    trainer = tiny_run(tmp_path)
    assert trainer.global_step == 8


def test_torchwork_resume_cli_continues_the_recorded_command(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    killed = subprocess.run([sys.executable, str(SCRIPT), str(runs), str(out), "--kill-at", "6", "--epochs", "1"],
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    # the recorded command still kills at step 6, but the resumed run starts after step 4's checkpoint
    # and is killed again at 6; so record a command without --kill-at to resume with
    run = next(runs.iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["command"]["argv"] = [str(SCRIPT), str(runs), str(out), "--epochs", "1"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "resume", str(run), "--yes"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr and out.exists()
    assert torch.load(out, weights_only=True)["run"] == str(run.resolve())


def test_torchwork_resume_cli_rejects_a_non_run_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "resume", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not a torchwork run folder" in done.stderr
