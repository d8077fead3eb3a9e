"""engine/checkpoint.py: the Trainer's checkpoint payload, typed, and the file format it keeps."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from engine_helpers import batches, small_trainer

from torchwork import Trainer
from torchwork.engine.checkpoint import TrainerCheckpoint
from torchwork.errors import CheckpointError
from torchwork.runs.checkpoint import load_checkpoint

# The entries of a checkpoint file, in the order they are written (the on-disk format: a change here is a
# change of format_version, not a refactoring; an entry added at the end that older checkpoints may lack,
# like "threads", is not).
FILE_ENTRIES = ["format_version", "world_size", "per_rank", "model", "optimizer", "scheduler", "scaler", "counters",
                "rng", "epoch_start_rng", "loader_rng", "epoch_totals", "history", "callbacks", "step_fn", "threads",
                "stopped"]


def _trainer(seed: int = 0) -> tuple[Trainer, list[tuple[torch.Tensor, torch.Tensor]]]:
    return small_trainer(threads=1, early_stopping="train_loss"), batches(4, seed)


def test_the_fields_are_the_file_entries_in_order() -> None:
    fields = [f.name for f in dataclasses.fields(TrainerCheckpoint)]
    assert fields == [*FILE_ENTRIES, "extra"]
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    assert list(trainer.state_dict()) == FILE_ENTRIES


def test_state_dict_and_load_state_dict_round_trip_with_what_a_run_folder_adds(tmp_path: Path) -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    trainer.step(data[0])
    trainer.save(tmp_path / "c.pt")
    state = load_checkpoint(tmp_path / "c.pt")
    state["best_value"], state["run"] = 0.5, "20260101-000000"
    checkpoint = TrainerCheckpoint.from_state_dict(state)
    assert checkpoint.counters["global_step"] == 5 and checkpoint.scheduler is not None
    assert checkpoint.extra == {"best_value": 0.5, "run": "20260101-000000"}
    again = checkpoint.state_dict()
    assert list(again) == list(state)
    assert all(again[name] is state[name] for name in state)  # the same objects: nothing copied or rebuilt


def test_a_checkpoint_without_the_entries_older_versions_lacked_resumes_exactly() -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    state = copy.deepcopy(trainer.state_dict())  # its tensors are the live ones: the step below changes them
    for name in ("world_size", "per_rank", "callbacks", "scaler", "history", "threads", "stopped"):
        del state[name]
    expected = trainer.step(data[1])
    resumed = small_trainer(threads=1, early_stopping="train_loss")
    torch.manual_seed(1)  # other RNG streams than the saved ones: the checkpoint must bring them back
    resumed.load_state_dict(state)
    assert resumed.global_step == 4 and resumed.history == []
    assert torch.equal(resumed.step(data[1]), expected)


def test_a_damaged_field_is_refused_before_anything_is_kept() -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    state = trainer.state_dict()
    state["counters"] = {**state["counters"], "epoch": -1}
    checkpoint = TrainerCheckpoint()
    with pytest.raises(CheckpointError, match=r"checkpoint c\.pt cannot be resumed: counters\['epoch'\] is -1, "
                                              r"not a count \(an integer >= 0\)\."):
        checkpoint.load_state_dict(state, "c.pt")
    assert checkpoint == TrainerCheckpoint()
    before = [p.detach().clone() for p in trainer.model.parameters()]
    with pytest.raises(CheckpointError, match="given to load_state_dict cannot be resumed"):
        trainer.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


# Trainer.save and Trainer.load: the payload through the file, both ways.
def test_save_and_load_continue_an_own_loop_exactly(tmp_path) -> None:
    trainer = small_trainer()
    for batch in batches(3):
        trainer.step(batch)
    path = tmp_path / "own.pt"
    trainer.save(path)
    assert (tmp_path / "own.pt.sha256").exists()
    later = batches(4, seed=1)
    expected = [float(trainer.step(batch)) for batch in later]

    again = small_trainer()
    again.load(path)
    assert again.global_step == 3 and again.scheduler.last_epoch == 3
    assert [float(again.step(batch)) for batch in later] == expected  # dropout's RNG stream included
    for a, b in zip(trainer.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)


def test_save_writes_fits_format_both_ways(tmp_path) -> None:
    trainer = small_trainer(run_dir=tmp_path / "runs")
    trainer.fit(batches(4), epochs=1)
    checkpoint = sorted((trainer.run_path / "checkpoints").glob("step-*.pt"))[-1]
    loaded = small_trainer()
    loaded.load(checkpoint)  # fit's checkpoint, read by load
    assert loaded.global_step == 4 and loaded.epoch == 1
    loaded.save(tmp_path / "mine.pt")
    resumed = small_trainer()
    history = resumed.fit(batches(4), epochs=2, resume=tmp_path / "mine.pt")  # save's file, read by fit
    assert [h["epoch"] for h in history] == [1, 2] and resumed.global_step == 8


def test_load_refuses_a_damaged_file(tmp_path) -> None:
    trainer = small_trainer()
    trainer.step(batches(1)[0])
    trainer.save(tmp_path / "own.pt")
    (tmp_path / "own.pt").write_bytes((tmp_path / "own.pt").read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        small_trainer().load(tmp_path / "own.pt")


def test_a_resume_under_threads_auto_keeps_the_count_the_run_had(tmp_path: Path) -> None:
    previous = torch.get_num_threads()
    try:
        trainer, data = _trainer()
        trainer.fit(data, epochs=1)
        trainer.save(tmp_path / "c.pt")
        assert load_checkpoint(tmp_path / "c.pt")["threads"] == 1
        torch.set_num_threads(2)
        auto = small_trainer(threads="auto", early_stopping="train_loss")
        auto.fit(data, epochs=2, resume=tmp_path / "c.pt")
        assert torch.get_num_threads() == 1 and auto.thread_choice.threads == 1
        assert auto.thread_choice.reason.startswith("recorded by the run being resumed")
        explicit = small_trainer(threads=2, early_stopping="train_loss")  # a count asked for always wins
        explicit.fit(data, epochs=2, resume=tmp_path / "c.pt")
        assert torch.get_num_threads() == 2 and explicit.thread_choice.threads == 2
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_a_checkpoint_with_a_thread_count_that_is_not_one_is_refused(threads) -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    state = dict(trainer.state_dict(), threads=threads)
    with pytest.raises(CheckpointError, match="'threads' is .*not a thread count"):
        small_trainer(threads=1).load_state_dict(state)


@pytest.mark.parametrize("stopped", [True, 3, "x" * 1001])
def test_a_checkpoint_whose_stop_reason_is_not_a_short_text_is_refused(stopped) -> None:
    trainer, data = _trainer()
    trainer.fit(data, epochs=1)
    with pytest.raises(CheckpointError, match="'stopped' is .*not why training stopped"):
        small_trainer(threads=1).load_state_dict(dict(trainer.state_dict(), stopped=stopped))


def test_a_run_that_early_stopping_ended_is_resumed_as_it_ended_not_trained_further(tmp_path: Path) -> None:
    """A finished first training of a script, resumed by `torchwork resume` (issue 49, item 10), must be restored
    as it was: it used to train one more epoch at each resume, since the stop was not in its checkpoint."""
    from torchwork.engine.callbacks import EarlyStopping

    def fit() -> Trainer:
        trainer = small_trainer(threads=1, run_dir=tmp_path, tensorboard=False, guard=False,
                                callbacks=[EarlyStopping("train_loss", patience=1, min_delta=100.0)])
        trainer.fit(batches(4, 0), epochs=30, resume="latest")
        return trainer

    stopped = fit()  # epoch 1 improves on inf, epoch 2 not by 100: stopped after epoch 2
    assert stopped.epoch == 2 and stopped.global_step == 8
    weights = [p.detach().clone() for p in stopped.model.parameters()]
    resumed = fit()
    assert resumed.run_path == stopped.run_path and resumed.epoch == 2 and resumed.global_step == 8
    assert all(torch.equal(a, b) for a, b in zip(weights, resumed.model.parameters()))
    assert resumed.stop_reason is not None and resumed.stop_reason.startswith("early stopping: train_loss has not")


def test_a_nan_first_validation_loss_leaves_the_run_resumable_and_its_best_finite(tmp_path: Path) -> None:
    """The first epoch's validation loss is NaN (the weights finite). The checkpoint recorded it as the best
    value, which the resume then refused ('best_value' is nan), and best.pt never left epoch 1."""
    validations = []

    def loss_nan_at_first_validation(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(outputs, targets)
        if not torch.is_grad_enabled():
            validations.append(1)
            return loss * float("nan") if len(validations) <= 2 else loss  # both batches of epoch 1
        return loss

    def fit(epochs: int) -> Trainer:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.01), loss_nan_at_first_validation,
                          device="cpu", progress=False, threads=1, run_dir=tmp_path, tensorboard=False,
                          guard=False, checkpoint_monitor=("val_loss", "min"))
        trainer.fit(batches(4, 0), batches(2, 1), epochs=epochs, resume="latest")
        return trainer

    first = fit(2)
    assert first.history[0]["val_loss"] != first.history[0]["val_loss"]  # NaN, as planted
    best = json.loads((first.run_path / "checkpoints" / "best.json").read_text())
    assert best["step"] == 8 and best["value"] == first.history[1]["val_loss"]
    resumed = fit(3)  # refused before: the checkpoint's best_value was NaN
    assert resumed.run_path == first.run_path and resumed.epoch == 3


# A checkpoint written by the code before the Trainer's split (#50, commit 53be24c): fit's run folder,
# checkpoint_every_n_steps=6, the trainer and loader below, 4 batches an epoch, so mid-epoch 2 (its
# epoch_totals, with named loss terms and a gradient norm, and the shuffling loader's epoch-start state).
# That code's uninterrupted 3 epochs, and its resume from this file, logged these epoch losses.
BEFORE_THE_SPLIT = Path(__file__).parent / "assets" / "mid_epoch_before_50.pt"
BEFORE_THE_SPLIT_LOSSES = [0.9279378652572632, 0.8535914421081543, 0.9114115238189697]


def _named_losses(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"mse": torch.nn.functional.mse_loss(outputs, targets), "l1": torch.nn.functional.l1_loss(outputs, targets)}


def _shuffled_run() -> tuple[Trainer, torch.utils.data.DataLoader]:
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5)
    trainer = Trainer(model, optimizer, _named_losses, scheduler, device="cpu", progress=False, threads=1,
                      clip_grad_norm=1.0, loss_weights={"l1": 0.5})
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
    return trainer, DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1))


def test_a_mid_epoch_checkpoint_written_before_the_split_resumes_exactly() -> None:
    trainer, loader = _shuffled_run()
    whole = trainer.fit(loader, epochs=3)
    resumed, loader = _shuffled_run()
    history = resumed.fit(loader, epochs=3, resume=BEFORE_THE_SPLIT)
    assert resumed.global_step == 12 and [h["epoch"] for h in history] == [1, 2, 3]
    # epoch 2's figures add the file's epoch_totals (its first two batches) to the two batches trained here;
    # epoch 1's come from the file: written on another CPU, a float32 figure may differ in its last bit there
    # (an AMD EPYC, 6 Dec: train_mse 0.62469858 against 0.62469864), so the floats are compared to 1e-6
    for name in ("samples", "steps"):
        assert [h[name] for h in history] == [h[name] for h in whole], name
    for name in ("train_loss", "train_mse", "train_l1", "grad_norm"):
        assert [h[name] for h in history] == pytest.approx([h[name] for h in whole], rel=1e-6, abs=1e-7), name
    assert [h["train_loss"] for h in history] == pytest.approx(BEFORE_THE_SPLIT_LOSSES, rel=1e-6)
    for a, b in zip(trainer.model.parameters(), resumed.model.parameters()):  # the same last-bit allowance
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
