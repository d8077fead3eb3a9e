"""Step-based training (nanoGPT's shape): ``fit(max_steps=N, eval_every=K)`` trains exactly N optimizer steps
across as many epochs as it takes, evaluates several named sets every K steps (and at step 0 when asked),
picks best.pt and stops early on the chosen set, and resumes bit for bit after a SIGKILL mid-training or
mid-evaluation; the callbacks' epoch-start and evaluation hooks run in order; bad settings are refused
before anything trains."""

from __future__ import annotations

import json
import math
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from runs_helpers import run_resume_script
from torch import nn

from torchwork import EarlyStopping, Trainer
from torchwork.errors import ConfigError

Batch = tuple[torch.Tensor, torch.Tensor]


def batches(n: int, seed: int = 0, flip: bool = False) -> list[Batch]:
    """``n`` batches of a linearly separable task (labels flipped: the same inputs, the opposite task)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(8, 4, generator=g)
        y = (x[:, 0] > 0).long()
        out.append((x, 1 - y if flip else y))
    return out


def trainer(tmp_path: Path | None = None, **options: Any) -> Trainer:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    run = {"run_dir": tmp_path / "runs"} if tmp_path is not None else {}
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), nn.CrossEntropyLoss(), device="cpu",
                   threads=1, progress=False, **run, **options)


class Recorder:
    """Every hook, in the order called, with the step it was called at."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_fit_start(self, t):
        self.calls.append(("fit_start", t.global_step))

    def on_epoch_start(self, t):
        self.calls.append(("epoch_start", t.global_step))

    def on_step_end(self, t, logs):
        self.calls.append(("step_end", t.global_step))

    def on_evaluate_start(self, t, name):
        self.calls.append(("evaluate_start", name, t.global_step))

    def on_evaluate_end(self, t, name, metrics):
        self.calls.append(("evaluate_end", name, sorted(metrics)))

    def on_epoch_end(self, t, logs):
        self.calls.append(("epoch_end", t.global_step))

    def on_fit_end(self, t):
        self.calls.append(("fit_end", t.global_step))


class ListLogger:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, Any]]] = []

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.rows.append((step, dict(metrics)))


# ---------------------------------------------------------------------------------------------- max_steps
def test_max_steps_stops_mid_epoch_at_exactly_n_steps_bit_identical_to_a_hand_loop() -> None:
    data = batches(7)
    fitted = trainer()
    history = fitted.fit(data, max_steps=10)  # one epoch of 7, then 3 steps into the second
    assert (fitted.global_step, fitted.epoch, fitted.batch_in_epoch) == (10, 1, 3)
    assert [h["epoch"] for h in history] == [1, 2] and history[-1]["steps"] == 3  # the partial epoch, summed

    torch.manual_seed(0)
    hand = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(hand.parameters(), lr=0.5)
    for step in range(10):
        x, y = data[step % 7]
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(hand(x), y).backward()
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(hand.parameters(), fitted.model.parameters()))


def test_max_steps_counts_optimizer_steps_under_accumulation() -> None:
    seen = []

    def counting_loss(outputs, targets):
        seen.append(len(targets))
        return nn.functional.cross_entropy(outputs, targets)

    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    fitted = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), counting_loss, device="cpu", threads=1,
                     progress=False, accumulate=3)
    fitted.fit(batches(7), max_steps=5)  # windows of 3, 3, 1 micro-batches: 3 steps an epoch
    assert (fitted.global_step, fitted.epoch, fitted.batch_in_epoch) == (5, 1, 6)
    assert len(seen) == 7 + 6


def test_the_guard_checks_the_last_steps_of_a_run_that_stops_mid_epoch() -> None:
    calls = []

    def loss_going_nan(outputs, targets):
        calls.append(1)
        loss = nn.functional.cross_entropy(outputs, targets)
        return loss * math.nan if len(calls) == 3 else loss

    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    fitted = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), loss_going_nan, device="cpu", threads=1,
                     progress=False)  # the guard checks every 50 steps: at the stop, the 3 since the start
    with pytest.warns(UserWarning, match="The loss became nan at step 3"):
        fitted.fit(batches(7), max_steps=3)
    assert [f.id for f in fitted.guard.findings] == ["non-finite-loss"]


@pytest.mark.parametrize(("epochs", "max_steps", "steps"), [(1, 100, 7), (5, 3, 3), (2, None, 14)])
def test_epochs_and_max_steps_together_stop_at_whichever_comes_first(epochs, max_steps, steps) -> None:
    fitted = trainer()
    fitted.fit(batches(7), epochs=epochs, max_steps=max_steps)
    assert fitted.global_step == steps


# ---------------------------------------------------------------------------------------------- evaluation
def test_eval_every_on_two_sets_logs_both_with_their_prefix() -> None:
    logger = ListLogger()
    fitted = trainer(loggers=[logger])
    train, val = batches(5), batches(3, seed=1)
    history = fitted.fit(train, {"train": train, "val": val}, max_steps=10, eval_every=4)
    assert [h["step"] for h in history] == [4, 8, 10]  # every 4 steps, and at the end
    assert all(sorted(h) == ["step", "train/loss", "val/loss"] for h in history)
    evaluations = [(step, row) for step, row in logger.rows if "val/loss" in row]
    assert [step for step, _ in evaluations] == [4, 8, 10]
    now = {"train/loss": fitted.evaluate(train)["loss"], "val/loss": fitted.evaluate(val)["loss"]}
    assert history[-1] == {"step": 10, **now}  # the end's evaluation: of the final weights, per set


def test_evaluating_every_k_steps_changes_nothing_in_the_training() -> None:
    """Dropout and a shuffled loader drawing on the global RNG, evaluated on itself: the weights after 12
    steps do not depend on how often (or whether) the run evaluated."""
    def weights(**evaluation: Any) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
        fitted = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.5), nn.CrossEntropyLoss(), device="cpu",
                         threads=1, progress=False)
        data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
        train = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
        fitted.fit(train, **({"val_loader": {"train": train}} if evaluation else {}), max_steps=12, **evaluation)
        return list(fitted.model.parameters())

    plain = weights()
    for evaluation in ({"eval_every": 1}, {"eval_every": 5, "eval_at_start": True}):
        assert all(torch.equal(a, b) for a, b in zip(plain, weights(**evaluation))), evaluation


def test_eval_at_start_evaluates_the_untrained_model_at_step_0() -> None:
    val = batches(3, seed=1)
    untrained = trainer().evaluate(val)["loss"]
    fitted = trainer()
    history = fitted.fit(batches(5), val, max_steps=6, eval_every=3, eval_at_start=True)
    assert [h["step"] for h in history] == [0, 3, 6]
    assert history[0]["val_loss"] == untrained  # a single loader keeps today's name
    assert history[-1]["val_loss"] < untrained


def test_named_sets_at_epochs_end_are_prefixed_in_the_epochs_record() -> None:
    fitted = trainer()
    history = fitted.fit(batches(4), {"train": batches(4), "val": batches(2, seed=1)}, epochs=2)
    assert [h["epoch"] for h in history] == [1, 2]
    assert {"train_loss", "train/loss", "val/loss"} <= set(history[0]) and "val_loss" not in history[0]


# ------------------------------------------------------------------------------- best.pt and early stopping
def _best(run: Path) -> dict[str, Any]:
    return json.loads((run / "checkpoints" / "best.json").read_text())


def test_best_checkpoint_is_chosen_on_the_val_set_by_default(tmp_path) -> None:
    train = batches(4)
    sets = {"train": train, "val": batches(4, flip=True)}  # learning the task makes "val" worse
    fitted = trainer(tmp_path)
    history = fitted.fit(train, sets, max_steps=8, eval_every=2)
    best = _best(fitted.run_path)
    assert best["monitor"] == "val/loss" and best["step"] == 2
    assert best["value"] == min(h["val/loss"] for h in history)
    assert history[-1]["train/loss"] < history[0]["train/loss"]
    on_train = trainer(tmp_path / "other", checkpoint_monitor=("train/loss", "min"))
    on_train.fit(train, sets, max_steps=8, eval_every=2)
    assert _best(on_train.run_path)["step"] == 8


def test_several_sets_without_val_need_a_monitor_for_best_pt(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"none named 'val'.*checkpoint_monitor=\('a/loss', 'min'\)"):
        trainer(tmp_path).fit(batches(4), {"a": batches(2), "b": batches(2)}, max_steps=4, eval_every=2)
    assert not (tmp_path / "runs").exists()


def test_early_stopping_counts_evaluations_and_the_stop_is_kept_on_resume(tmp_path) -> None:
    train = batches(4)
    sets = {"train": train, "val": batches(4, flip=True)}
    fitted = trainer(tmp_path, early_stopping=EarlyStopping("val/loss", patience=2))
    history = fitted.fit(train, sets, max_steps=100, eval_every=2)
    assert [h["step"] for h in history] == [2, 4, 6]  # best at 2, then two evaluations without progress
    assert fitted.global_step == 6 and fitted.should_stop
    assert "step 2" in fitted.callbacks[0].reason and "2 evaluations" in fitted.callbacks[0].reason
    again = trainer(tmp_path, early_stopping=EarlyStopping("val/loss", patience=2))
    again.fit(train, sets, max_steps=100, eval_every=2, resume=fitted.run_path)
    assert again.global_step == 6 and len(again.history) == 3  # ended: not trained, not evaluated again


def test_a_finished_step_run_resumed_trains_and_evaluates_nothing_more(tmp_path) -> None:
    train, val = batches(5), batches(2, seed=1)
    fitted = trainer(tmp_path)
    fitted.fit(train, val, max_steps=7, eval_every=3)
    again = trainer(tmp_path)
    again.fit(train, val, max_steps=7, eval_every=3, resume=fitted.run_path)
    assert again.global_step == 7 and again.history == fitted.history
    assert all(torch.equal(a, b) for a, b in zip(fitted.model.parameters(), again.model.parameters()))


# ------------------------------------------------------------------------------------------- exact resume
STEPS = ["--max-steps", "25", "--eval-every", "5"]  # 10 steps an epoch: an evaluation at each epoch's end too


def _run_script(run_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_resume_script(run_dir, out, *STEPS, *extra)  # tests/runs/resume_script.py


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("steps")
    assert (done := _run_script(root / "runs", root / "final.pt")).returncode == 0, done.stderr
    return torch.load(root / "final.pt", weights_only=True)


def _kill_then_finish(tmp_path: Path, uninterrupted: dict, kills: list[list[str]], resumed_from: str) -> None:
    """Killed at each of ``kills``, each run resuming the one before; the last run finishes: the weights,
    the history and the logged evaluations are the uninterrupted run's."""
    runs, out = tmp_path / "runs", tmp_path / "final.pt"
    for kill in kills:
        killed = _run_script(runs, out, *kill)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _run_script(runs, out)
    assert resumed.returncode == 0, resumed.stderr
    assert f"from {resumed_from}" in resumed.stderr
    result = torch.load(out, weights_only=True)
    for key, value in uninterrupted["model"].items():
        assert torch.equal(result["model"][key], value), f"{key} differs after resume"
    assert result["history"] == uninterrupted["history"]
    assert [h["step"] for h in result["history"]] == [0, 5, 10, 15, 20, 25]
    lines = [json.loads(line) for line in (next(runs.iterdir()) / "metrics.jsonl").read_text().splitlines()]
    evaluated = [line["step"] for line in lines if "val/loss" in line]
    assert evaluated == [0, 5, 10, 15, 20, 25], "each evaluation logged once, the killed ones' lines dropped"


def test_sigkill_mid_evaluation_then_resume_by_step_is_bit_exact(tmp_path, uninterrupted) -> None:
    # in the evaluation at step 10 (an epoch's last step), then, resumed, in the one at step 20 (after the
    # train set's pass): resumed from step 16, the last checkpoint before it
    _kill_then_finish(tmp_path, uninterrupted, [["--kill-in-eval", "10"], ["--kill-in-eval", "20"]],
                      "step-000000016.pt")


def test_sigkill_mid_training_then_resume_by_step_is_bit_exact(tmp_path, uninterrupted) -> None:
    _kill_then_finish(tmp_path, uninterrupted, [["--kill-at", "13"]], "step-000000012.pt")


# ------------------------------------------------------------------------------------------------- hooks
def test_the_hooks_are_called_in_order_with_step_based_evaluation() -> None:
    recorder = Recorder()
    fitted = trainer(callbacks=[recorder])
    fitted.fit(batches(4), {"train": batches(2), "val": batches(2, seed=1)}, max_steps=6, eval_every=3,
               eval_at_start=True)

    def evaluation(step: int) -> list[tuple[Any, ...]]:
        return [("evaluate_start", "train", step), ("evaluate_end", "train", ["train/loss"]),
                ("evaluate_start", "val", step), ("evaluate_end", "val", ["val/loss"])]

    assert recorder.calls == [("fit_start", 0), *evaluation(0), ("epoch_start", 0),
                              ("step_end", 1), ("step_end", 2), ("step_end", 3), *evaluation(3), ("step_end", 4),
                              ("epoch_end", 4), ("epoch_start", 4), ("step_end", 5), ("step_end", 6),
                              *evaluation(6), ("fit_end", 6)]


def test_the_hooks_are_called_in_order_with_epochs() -> None:
    recorder = Recorder()
    trainer(callbacks=[recorder]).fit(batches(2), batches(2, seed=1), epochs=2)
    one = [("step_end", None), ("step_end", None), ("evaluate_start", "val", None),
           ("evaluate_end", "val", ["val_loss"]), ("epoch_end", None)]
    calls = [(c[0], *c[1:-1], None) if c[0] != "evaluate_end" else c for c in recorder.calls]
    assert calls == [("fit_start", None), ("epoch_start", None), *one, ("epoch_start", None), *one,
                     ("fit_end", None)]


def test_epoch_start_is_not_called_again_for_an_epoch_a_resume_continues(tmp_path) -> None:
    first = trainer(tmp_path, checkpoint_every_n_steps=2)
    first.fit(batches(4), epochs=2)
    checkpoint = first.run_path / "checkpoints" / "step-000000006.pt"  # mid-way through epoch 2
    recorder = Recorder()
    trainer(tmp_path, callbacks=[recorder], checkpoint_every_n_steps=2).fit(batches(4), epochs=3, resume=checkpoint)
    assert [c for c in recorder.calls if c[0] == "epoch_start"] == [("epoch_start", 8)]  # epoch 3's only


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("settings", "message"), [
    ({"max_steps": 0}, r"max_steps=0: the number of optimizer steps .* integer >= 1"),
    ({"max_steps": -5}, r"max_steps=-5"),
    ({"max_steps": math.nan}, r"max_steps=nan"),
    ({"max_steps": math.inf}, r"max_steps=inf"),
    ({"max_steps": 2.5}, r"max_steps=2\.5"),
    ({"max_steps": True}, r"max_steps=True"),
    ({"max_steps": "100"}, r"max_steps='100'"),
    ({"max_steps": 10, "eval_every": 0}, r"eval_every=0: the optimizer steps between evaluations"),
    ({"max_steps": 10, "eval_every": math.nan}, r"eval_every=nan"),
    ({"epochs": -1}, r"epochs=-1: the number of epochs to train; it must be an integer >= 0"),
    ({"epochs": 1.5}, r"epochs=1\.5"),
    ({"epochs": 2**63}, r"epochs=9223372036854775808: the number of epochs to train; it must be below 2\*\*63"),
    pytest.param({"epochs": 10**5000}, r"epochs=<an integer of 5001 digits or so>: .* below 2\*\*63",
                 id="epochs-5001-digits"),  # the progress line's str() raised ValueError at the first batch
    ({"max_steps": 2**64}, r"max_steps=18446744073709551616: .* below 2\*\*63"),
    ({"max_steps": 10, "eval_at_start": 1}, r"eval_at_start=1 must be True or False"),
    ({"max_steps": 10, "eval_every": 5, "val_loader": None}, r"eval_every=5, but fit has nothing to evaluate"),
    ({"eval_at_start": True, "val_loader": None}, r"eval_at_start=True, but fit has nothing to evaluate"),
    ({"val_loader": {}}, r"val_loader=\{\} names no evaluation set"),
    ({"val_loader": {"a/b": [1]}}, r"a set's name is a non-empty string without '/'"),
    ({"val_loader": {"val": None}}, r"val_loader\['val'\] is NoneType, not a loader"),
])
def test_bad_settings_are_refused_with_one_line_before_any_work(tmp_path, settings, message) -> None:
    fitted = trainer(tmp_path)
    before = [p.detach().clone() for p in fitted.model.parameters()]
    settings = {"val_loader": batches(2), **settings}
    with pytest.raises(ConfigError, match=message) as refused:
        fitted.fit(batches(4), **settings)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "runs").exists() and fitted.global_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, fitted.model.parameters()))


@pytest.mark.parametrize(("options", "message"), [
    ({"early_stopping": "val_loss"}, r"early stopping's monitor='val_loss' is no metric an evaluation logs: the "
                                     r"evaluation sets log train/\.\.\., val/\.\.\. \(e\.g\. val/loss\)"),
    ({"checkpoint_monitor": ("val_accuracy", "max")}, r"checkpoint_monitor='val_accuracy'"),
])
def test_a_monitor_no_evaluation_logs_is_refused_before_any_work(tmp_path, options, message) -> None:
    fitted = trainer(tmp_path, **options)
    with pytest.raises(ConfigError, match=message):
        fitted.fit(batches(4), {"train": batches(2), "val": batches(2)}, max_steps=4, eval_every=2)
    assert not (tmp_path / "runs").exists()


def test_reduce_on_plateau_steps_at_each_evaluation_on_a_named_sets_metric() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
    fitted = Trainer(model, optimizer, nn.CrossEntropyLoss(), plateau, device="cpu", threads=1, progress=False,
                     plateau_monitor="val/loss")
    train = batches(4)
    fitted.fit(train, {"val": batches(4, flip=True)}, max_steps=8, eval_every=2)  # val worsens at each one
    assert optimizer.param_groups[0]["lr"] == 0.5 * 0.5 ** 3  # halved at evaluations 2, 3 and 4
    with pytest.raises(ConfigError, match=r"plateau_monitor='val_loss' is no metric"):
        Trainer(model, optimizer, nn.CrossEntropyLoss(), plateau, device="cpu", progress=False).fit(
            train, {"val": train}, max_steps=2, eval_every=1)
