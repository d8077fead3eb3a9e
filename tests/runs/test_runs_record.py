"""What a run records at its start and end: data fingerprints, the code patch, threads, state, HParams."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch
from runs_helpers import git_repo, tiny_fit

from torchwork.data import TextDataset
from torchwork.runs.fingerprint import compare_rows, read_rows, record_splits, split_rows


def test_text_fingerprint_tells_relabelled_added_removed_and_reordered_rows(tmp_path):
    a = split_rows(TextDataset(["a", "b", "c", "d"], [0, 1, 2, 0]))
    relabelled = split_rows(TextDataset(["a", "b", "c", "d"], [0, 1, 2, 1]))
    resplit = split_rows(TextDataset(["a", "b", "e"], [0, 1, 2]))
    shuffled = split_rows(TextDataset(["d", "c", "b", "a"], [0, 2, 1, 0]))
    assert compare_rows(a, relabelled) == {"removed": 0, "added": 0, "relabelled": 1, "reordered": 0}
    assert compare_rows(a, resplit) == {"removed": 2, "added": 1, "relabelled": 0, "reordered": 0}
    assert compare_rows(a, shuffled)["reordered"] == 1
    recorded = record_splits(tmp_path, {"train": TextDataset(["a", "b"], [0, 1])})["train"]
    assert recorded["rows"] == 2 and recorded["classes"] == {"0": 1, "1": 1}
    assert (read_rows(tmp_path, recorded) == split_rows(TextDataset(["a", "b"], [0, 1]))).all()
    assert read_rows(tmp_path, {**recorded, "row_file": "../x.rows"}) is None  # names a file outside the run


def test_subset_and_tensor_datasets_are_fingerprinted_row_by_row():
    x, y = torch.arange(12.0).reshape(6, 2), torch.tensor([0, 1, 0, 1, 1, 0])
    whole = split_rows(torch.utils.data.TensorDataset(x, y))
    part = split_rows(torch.utils.data.Subset(torch.utils.data.TensorDataset(x, y), [4, 1]))
    assert whole.shape == (6, 2) and (part == whole[[4, 1]]).all()
    assert split_rows([1, 2, 3]) is None


def test_a_run_records_fingerprints_code_patch_threads_and_its_end(tmp_path, monkeypatch):
    repo = git_repo(tmp_path / "project", {"train.py": "loss = 'cross entropy'\n"})
    (repo / "train.py").write_text("loss = 'focal'\n")  # a change not committed: the patch must say what
    monkeypatch.chdir(repo)
    torch.set_num_threads(1)
    trainer = tiny_fit(tmp_path / "runs", tensorboard=True)
    manifest = json.loads((trainer.run_path / "manifest.json").read_text())
    train = manifest["fingerprints"]["train"]
    assert train["rows"] == 64 and sum(train["classes"].values()) == 64 and len(train["sha256"]) == 64
    assert manifest["fingerprints"]["validation"]["rows"] == 32
    git = manifest["git"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert git["commit"] == head and git["dirty"] is True and git["patch_files"] == ["train.py"]
    patch = (trainer.run_path / git["patch"]).read_text()
    assert "+loss = 'focal'" in patch and "-loss = 'cross entropy'" in patch
    import hashlib

    assert hashlib.sha256(patch.encode()).hexdigest() == git["patch_sha256"]
    assert manifest["threads"]["torch"] == 1 and manifest["config"] == {"lr": 0.05, "epochs": 3, "seed": 0}
    assert manifest["state"] == "finished" and manifest["process"]["pid"] == os.getpid()
    monitor = manifest["monitor"]
    assert monitor["metric"] == "val_loss" and monitor["mode"] == "min" and monitor["steps"] == 12
    lines = [json.loads(line) for line in (trainer.run_path / "metrics.jsonl").read_text().splitlines()]
    val = [line["val_loss"] for line in lines if "val_loss" in line]
    assert monitor["final"] == pytest.approx(val[-1]) and monitor["best"] == pytest.approx(min(val))


def test_a_clean_tree_saves_no_patch_and_outside_git_nothing_is_claimed(tmp_path, monkeypatch):
    repo = git_repo(tmp_path / "project", {"train.py": "x = 1\n"})
    monkeypatch.chdir(repo)
    clean = json.loads((tiny_fit(tmp_path / "runs", epochs=1).run_path / "manifest.json").read_text())["git"]
    assert clean["dirty"] is False and "patch" not in clean
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert json.loads((tiny_fit(tmp_path / "runs2", epochs=1).run_path / "manifest.json").read_text())["git"] == {
        "commit": None, "dirty": None}


def test_a_failing_run_records_failed_with_the_error(tmp_path):
    class Boom(Exception):
        pass

    class Stop:
        def on_epoch_end(self, trainer, logs):
            raise Boom("stopped on purpose")

    with pytest.raises(Boom):
        tiny_fit(tmp_path / "runs", callbacks=[Stop()])
    (run,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["state"] == "failed" and manifest["error"] == "Boom: stopped on purpose"


def test_tensorboard_gets_the_hparams_table_in_the_run_folder(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    trainer = tiny_fit(tmp_path / "runs", lr=0.125, tensorboard=True)
    events = EventAccumulator(str(trainer.run_path / "tensorboard"))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["config.lr"].number_value == 0.125 and hparams["seed"].number_value == 0
    best = events.Scalars("hparams/best_val_loss")
    manifest = json.loads((trainer.run_path / "manifest.json").read_text())
    assert best[-1].value == pytest.approx(manifest["monitor"]["best"])
    assert [p.name for p in trainer.run_path.joinpath("tensorboard").iterdir() if p.is_dir()] == []  # one logdir


def test_a_dataset_whose_rows_cannot_be_read_is_said_so_and_the_run_goes_on(tmp_path):
    class Named(torch.utils.data.Dataset):
        texts, labels = ["a", "b"], ["good", "bad"]  # labels that are not class indices

        def __len__(self):
            return 2

    recorded = record_splits(tmp_path, {"train": torch.utils.data.DataLoader(Named())})
    assert recorded["train"]["rows"] is None and "could not be read (ValueError" in recorded["train"]["why"]


def _unseeded_fit(run_dir, monkeypatch) -> dict:
    """A run whose script never called seed_everything (torch draws its own seed): its manifest."""
    from torch import nn

    import torchwork.seeding
    from torchwork import Trainer

    monkeypatch.setattr(torchwork.seeding, "_seed", None)  # as in a fresh process that was never seeded
    model = nn.Linear(4, 2)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                      run_dir=run_dir, progress=False, threads=1)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    trainer.fit([(x, y)], epochs=1)
    return json.loads((trainer.run_path / "manifest.json").read_text())


def test_an_unseeded_run_records_torchs_initial_seed_and_diff_names_it(tmp_path, monkeypatch, capsys):
    from torchwork.cli import main

    torch.manual_seed(1234)
    first = _unseeded_fit(tmp_path / "runs", monkeypatch)
    assert first["seed"] is None and first["torch_initial_seed"] == 1234
    torch.manual_seed(99)
    second = _unseeded_fit(tmp_path / "runs", monkeypatch)
    assert second["torch_initial_seed"] == 99
    runs = sorted((tmp_path / "runs").iterdir())
    main(["runs", "show", str(runs[0])])
    assert "not seeded: torch's initial seed was 1234" in capsys.readouterr().out
    main(["runs", "diff", str(runs[0]), str(runs[1]), "--json"])
    seeds = [d for d in json.loads(capsys.readouterr().out)["differences"] if d["key"] == "seed"]
    assert [(d["a"], d["b"]) for d in seeds] == [(1234, 99)] and "initial seeds differ" in seeds[0]["note"]


def test_runs_diff_shows_the_configured_learning_rate_not_the_schedulers_current_one(tmp_path, capsys):
    from torch import nn

    from torchwork import Trainer
    from torchwork.cli import main

    for max_lr in (0.1, 0.3):
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=max_lr)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=max_lr, total_steps=4)
        trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), schedule, device="cpu", run_dir=tmp_path / "runs",
                          progress=False, threads=1)  # no config: the optimizer's settings are the settings
        trainer.fit([(torch.randn(8, 4), torch.randint(0, 2, (8,)))] * 2, epochs=2)
    first, second = sorted((tmp_path / "runs").iterdir())
    main(["runs", "diff", str(first), str(second), "--json"])
    rates = [(d["a"], d["b"]) for d in json.loads(capsys.readouterr().out)["differences"] if d["key"] == "optimizer.lr"]
    assert rates == [(0.1, 0.3)]  # not OneCycleLR's starting lr, max_lr / 25
