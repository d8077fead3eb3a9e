"""Resume from a checkpoint whose checksum is valid but whose contents are not a resumable checkpoint, and
from a run whose manifest is damaged: a one-line CheckpointError naming the field, nothing restored, and the
run's manifest records no resume that failed."""

from __future__ import annotations

import hashlib
import io
import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer, seed_everything
from torchwork.errors import CheckpointError


class Crash(Exception):
    pass


class CrashAt:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, logs):
        if trainer.global_step == self.step:
            raise Crash


def make_trainer(run_dir, callbacks=()):
    seed_everything(7)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
    return Trainer(model, optimizer, nn.CrossEntropyLoss(), scheduler, device="cpu", run_dir=run_dir,
                   checkpoint_every_n_steps=4, callbacks=list(callbacks), tensorboard=False, progress=False)


def loader():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.randint(0, 3, (80,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    """A run folder whose newest checkpoint is mid-epoch (step 8 of 10)."""
    torch.set_num_threads(1)
    runs = tmp_path_factory.mktemp("damaged") / "runs"
    with pytest.raises(Crash):
        make_trainer(runs, [CrashAt(9)]).fit(loader(), epochs=2)
    run = next(runs.iterdir())
    return run, run / "checkpoints" / "step-000000008.pt"


def rewrite(path, state):
    """Write ``state`` with a valid checksum, as save_checkpoint does (it would refuse NaN weights)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getvalue())
    path.with_name(path.name + ".sha256").write_text(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {path.name}\n")


def _set(*keys, value):
    def change(state):
        target = state
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return change


def _delete(*keys):
    def change(state):
        target = state
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return change


def _nan_weights(state):
    state["model"]["0.weight"] = torch.full_like(state["model"]["0.weight"], float("nan"))


def _exp_avg_shape(state):
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3, 3)


CORRUPTIONS = {
    "python-rng-string": (_set("rng", "python", value="x"), r"\['rng'\]\['python'\] is not a Python random"),
    "python-rng-short": (_set("rng", "python", value=(3, (1, 2), None)), r"\['python'\] is not a Python random"),
    "numpy-rng-missing": (_delete("rng", "numpy"), r"\['rng'\]\['numpy'\] is None, not a mapping"),
    "numpy-key-shape": (_set("rng", "numpy", "key", value=torch.zeros(3, dtype=torch.int64)), r"NumPy MT19937"),
    "numpy-pos-range": (_set("rng", "numpy", "pos", value=10_000), r"NumPy MT19937"),
    "torch-rng-size": (_set("rng", "torch", value=torch.zeros(5, dtype=torch.uint8)), r"not a torch generator"),
    "torch-rng-float": (_set("rng", "torch", value=torch.zeros(5056)), r"\['rng'\]\['torch'\] is a float32 tensor"),
    "epoch-start-rng": (_set("epoch_start_rng", "torch", value="x"), r"\['epoch_start_rng'\]\['torch'\] is 'x'"),
    "counters-string": (_set("counters", "global_step", value="8"), r"counters\['global_step'\] is '8', not a count"),
    "counters-negative": (_set("counters", "batch_in_epoch", value=-1), r"counters\['batch_in_epoch'\] is -1"),
    "counters-missing": (_delete("counters", "epoch"), r"counters\['epoch'\] is None"),
    "counters-list": (_set("counters", value=[8]), r"'counters' is \[8\], not a mapping"),
    "history-string": (_set("history", value="x"), r"'history' is not a list"),
    "history-numbers": (_set("history", value=[1, 2]), r"'history' is not a list"),
    "optimizer-state-number": (_set("optimizer", "state", value=5), r"optimizer\['state'\] is 5"),
    "optimizer-groups-missing": (_delete("optimizer", "param_groups"), r"optimizer\['param_groups'\]"),
    "optimizer-groups-empty": (_set("optimizer", "param_groups", value=[]), r"optimizer has 0 parameter group"),
    "optimizer-exp-avg-shape": (_exp_avg_shape, r"optimizer state 'exp_avg' of parameter 0 has shape \(3, 3\)"),
    "scheduler-string": (_set("scheduler", value="x"), r"'scheduler' is 'x', not a mapping"),
    "best-value-nan": (_set("best_value", value=float("nan")), r"'best_value' is nan"),
    "per-rank-string": (_set("per_rank", value="x"), r"'per_rank' is not a list"),
    "world-size-zero": (_set("world_size", value=-2), r"'world_size' is -2"),
    "epoch-totals": (_set("epoch_totals", value=[1]), r"\['epoch_totals'\] is not a mapping"),
    "nan-weights": (_nan_weights, r"weights \['0.weight'\] hold NaN/inf"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_a_checkpoint_with_valid_checksum_but_bad_contents_is_refused(crashed, tmp_path, within, name):
    import shutil

    source_run, _ = crashed
    run = tmp_path / source_run.name
    shutil.copytree(source_run, run)
    checkpoint = run / "checkpoints" / "step-000000008.pt"
    state = torch.load(checkpoint, weights_only=True)
    change, message = CORRUPTIONS[name]
    change(state)
    rewrite(checkpoint, state)
    manifest_before = (run / "manifest.json").read_text()
    trainer = make_trainer(tmp_path)
    weights_before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    with within(60), pytest.raises(CheckpointError, match=message):
        trainer.fit(loader(), epochs=2, resume=run)
    assert (run / "manifest.json").read_text() == manifest_before  # no resume recorded
    if name not in ("optimizer-groups-empty", "optimizer-exp-avg-shape"):  # found after the weights loaded
        assert all(torch.equal(v, weights_before[k]) for k, v in trainer.model.state_dict().items())


def test_a_good_resume_is_recorded_once_and_continues(crashed, tmp_path):
    import shutil

    source_run, _ = crashed
    run = tmp_path / source_run.name
    shutil.copytree(source_run, run)
    make_trainer(tmp_path).fit(loader(), epochs=2, resume=run)
    resumes = json.loads((run / "manifest.json").read_text())["resumes"]
    assert [(r["from"], r["step"]) for r in resumes] == [("step-000000008.pt", 8)]


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", r"manifest.json is damaged \("),
    ("[1, 2]", r"manifest.json is damaged \(not the JSON object"),
    ('{"resumes": 5}', r"'resumes' is not a list"),
    ("\xff\xfe", r"manifest.json is damaged \("),
    ("[" * 100_000, r"manifest.json is damaged \("),
])
def test_a_damaged_manifest_is_refused_before_anything_is_written(crashed, tmp_path, text, message):
    import shutil

    source_run, _ = crashed
    run = tmp_path / source_run.name
    shutil.copytree(source_run, run)
    (run / "manifest.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError, match=message):
        make_trainer(tmp_path).fit(loader(), epochs=2, resume=run)
    assert (run / "manifest.json").read_bytes() == text.encode("latin-1")


def test_load_state_dict_refuses_a_user_dict_with_bad_fields(tmp_path):
    trainer = make_trainer(None)
    state = trainer.state_dict()
    state["counters"]["epoch"] = 1.5
    with pytest.raises(CheckpointError, match=r"counters\['epoch'\] is 1.5"):
        trainer.load_state_dict(state)

