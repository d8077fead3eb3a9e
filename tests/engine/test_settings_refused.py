"""Every setting is checked before any work starts: a NaN/inf/negative optimizer hyperparameter, a count that is
no integer, a misspelt monitor, a run_dir that is a file, an absurd thread count are refused with one line
(a ConfigError saying what was wrong and how to fix it), leaving no run folder and the weights as they were;
``epochs`` with ``max_steps`` says which one ends training."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchwork import EarlyStopping, Trainer
from torchwork.engine.epoch import epoch_log_names
from torchwork.engine.options import DistributedOptions, LoggingOptions, StepOptions
from torchwork.errors import ConfigError
from torchwork.runs.folder import new_run_folder
from torchwork.runs.options import RunOptions
from torchwork.threads import MAX_THREADS, check_threads, choose_threads, usable_cpus


def batches(n: int = 4, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(n)]


def trainer(optimizer: Any = None, scheduler: Any = None, **options: Any) -> Trainer:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = optimizer(model) if optimizer is not None else torch.optim.SGD(model.parameters(), lr=0.1)
    options = {"progress": False, "threads": 1, "guard": False, **options}
    return Trainer(model, optimizer, nn.MSELoss(), scheduler(optimizer) if scheduler else None, device="cpu",
                   **options)


def refused_before_any_work(fitted: Trainer, tmp_path: Path, message: str, **fit: Any) -> ConfigError:
    """``fitted.fit(...)`` raises one line matching ``message``; no run folder, no weight changed."""
    before = [p.detach().clone() for p in fitted.model.parameters()]
    with pytest.raises(ConfigError, match=message) as refused:
        fitted.fit(batches(), **{"epochs": 2, **fit})
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "runs").exists() and fitted.global_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, fitted.model.parameters()))
    return refused.value


# ---------------------------------------------------------------------------------------------- the optimizer
def _sgd(**hyper: Any) -> Any:
    return lambda model: torch.optim.SGD(model.parameters(), **{"lr": 0.1, **hyper})


@pytest.mark.parametrize(("optimizer", "message"), [
    (_sgd(lr=math.nan), r"param_groups\[0\]\['lr'\]=nan is not a finite number: pass a finite value"),
    (_sgd(lr=math.inf), r"param_groups\[0\]\['lr'\]=inf is not a finite number"),
    (_sgd(lr=0.1, momentum=math.nan), r"param_groups\[0\]\['momentum'\]=nan is not a finite number"),
    (_sgd(lr=0.1, weight_decay=math.inf), r"param_groups\[0\]\['weight_decay'\]=inf"),
    (_sgd(lr=0.1, momentum=0.9, dampening=math.nan), r"param_groups\[0\]\['dampening'\]=nan"),
    (_sgd(lr=torch.tensor(math.nan)), r"param_groups\[0\]\['lr'\]=nan"),
    (lambda model: torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": math.inf}], lr=0.1),
     r"param_groups\[1\]\['lr'\]=inf"),
])
def test_a_non_finite_hyperparameter_is_refused_when_the_trainer_is_built(optimizer, message) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        trainer(optimizer)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("lr", math.nan, r"param_groups\[0\]\['lr'\]=nan is not a finite number: pass a finite value"),
    ("lr", -0.1, r"param_groups\[0\]\['lr'\]=-0\.1 is negative: pass a learning rate >= 0"),
    ("eps", math.nan, r"param_groups\[0\]\['eps'\]=nan is not a finite number"),
    ("betas", (0.9, math.nan), r"param_groups\[0\]\['betas'\]\[1\]=nan is not a finite number"),
    ("betas", [math.inf, 0.999], r"param_groups\[0\]\['betas'\]\[0\]=inf"),
    ("weight_decay", math.inf, r"param_groups\[0\]\['weight_decay'\]=inf"),
])
def test_a_param_group_edited_after_the_trainer_was_built_is_refused_when_fit_starts(tmp_path, key, value,
                                                                                       message) -> None:
    fitted = trainer(lambda model: torch.optim.Adam(model.parameters(), lr=1e-3), run_dir=tmp_path / "runs")
    fitted.optimizer.param_groups[0][key] = value  # torch's own checks ran when the optimizer was built
    refused_before_any_work(fitted, tmp_path, message)


def test_a_zero_learning_rate_freezes_its_group_and_is_allowed() -> None:
    frozen = trainer(lambda model: torch.optim.SGD([{"params": [model.weight], "lr": 0.0},
                                                   {"params": [model.bias]}], lr=0.1))
    weight = frozen.model.weight.detach().clone()
    frozen.fit(batches(), epochs=1)
    assert torch.equal(weight, frozen.model.weight) and frozen.global_step == 4


# ---------------------------------------------------------------------------------------------- counts and sizes
@pytest.mark.parametrize(("build", "message"), [
    (lambda: RunOptions(keep_checkpoints=1.5), r"keep_checkpoints=1\.5 must be an integer >= 1"),
    (lambda: RunOptions(keep_checkpoints=math.nan), r"keep_checkpoints=nan must be an integer >= 1"),
    (lambda: RunOptions(keep_checkpoints=True), r"keep_checkpoints=True must be an integer >= 1"),
    (lambda: RunOptions(keep_checkpoints=0), r"keep_checkpoints=0 must be an integer >= 1"),
    (lambda: LoggingOptions(log_every_n_steps=math.nan), r"log_every_n_steps=nan must be an integer >= 1"),
    (lambda: LoggingOptions(log_every_n_steps=1.5), r"log_every_n_steps=1\.5 must be an integer >= 1"),
    (lambda: LoggingOptions(log_every_n_steps=True), r"log_every_n_steps=True"),
    (lambda: LoggingOptions(progress_every_s=math.nan), r"progress_every_s=nan must be a finite number"),
    (lambda: LoggingOptions(progress_every_s=math.inf), r"progress_every_s=inf must be a finite number"),
    (lambda: StepOptions(loss_weights={"ce": math.nan}), r"loss_weights\['ce'\]=nan: a loss term's weight must"),
    (lambda: StepOptions(clip_grad_norm=True), r"clip_grad_norm=True must be a positive finite number"),
    (lambda: DistributedOptions(timeout_s=math.nan), r"distributed timeout_s=nan must be a finite number"),
    (lambda: DistributedOptions(timeout_s=-1), r"distributed timeout_s=-1 must be a finite number"),
    (lambda: EarlyStopping(min_delta=math.nan), r"EarlyStopping\(min_delta=nan\): .* a finite number >= 0"),
    (lambda: EarlyStopping(min_delta=math.inf), r"EarlyStopping\(min_delta=inf\)"),
    (lambda: EarlyStopping(min_delta=-0.1), r"EarlyStopping\(min_delta=-0\.1\)"),
    (lambda: EarlyStopping(patience=1.5), r"EarlyStopping\(patience=1\.5\): .* an integer >= 0"),
    (lambda: EarlyStopping(patience=-1), r"EarlyStopping\(patience=-1\)"),
    (lambda: EarlyStopping(patience=True), r"EarlyStopping\(patience=True\)"),
    (lambda: EarlyStopping(monitor=""), r"EarlyStopping\(monitor=''\): name the metric"),
    # integers past what a float holds: math.isfinite raised OverflowError, repr of 5,000 digits ValueError
    (lambda: StepOptions(clip_grad_norm=10**400), r"clip_grad_norm=<an integer of 401 digits or so> must be"),
    (lambda: StepOptions(clip_grad_value=10**5000), r"clip_grad_value=<an integer of 5001 digits or so> must"),
    (lambda: StepOptions(loss_weights={"ce": 10**400}), r"loss_weights\['ce'\]=<an integer of 401 digits"),
    (lambda: LoggingOptions(progress_every_s=10**400), r"progress_every_s=<an integer of 401 digits or so>"),
    (lambda: DistributedOptions(timeout_s=10**400), r"distributed timeout_s=<an integer of 401 digits or so>"),
    (lambda: EarlyStopping(min_delta=10**400), r"EarlyStopping\(min_delta=<an integer of 401 digits or so>\)"),
    (lambda: check_threads(10**5000), r"threads=<an integer of 5001 digits or so> is more than the"),
    (lambda: StepOptions(accumulate=2**40), r"accumulate=1099511627776: .* an integer from 1 \(no accumulation\) "
                                            r"to 262,144"),
    (lambda: StepOptions(accumulate=2.0), r"accumulate=2\.0: "),
    (lambda: StepOptions(keep_fp32=5), r"keep_fp32=5: pass submodule names or classes"),  # TypeError before
    (lambda: StepOptions(keep_fp32=["norm", 3]), r"keep_fp32=\['norm', 3\]: pass submodule names"),
    (lambda: trainer(callbacks=5), r"callbacks=5: pass a list of callback objects"),  # TypeError before
    # the class for an instance failed only when fit started ("missing 1 required positional argument")
    (lambda: trainer(callbacks=[EarlyStopping]), r"callbacks\[0\] is the class EarlyStopping, not a callback: "
                                                 r"pass an instance, EarlyStopping\(\.\.\.\)"),
    (lambda: trainer(callbacks=[object()]), r"callbacks\[0\] \(a object\) has none of the hooks on_fit_start"),
    # a non-empty string is true: each of these turned the thing on that "no" asked off
    (lambda: trainer(guard="no"), r"^guard='no': pass True or False"),
    (lambda: LoggingOptions(progress="no"), r"^progress='no': pass True or False"),
    (lambda: RunOptions(tensorboard="no"), r"^tensorboard='no': pass True or False"),
    (lambda: DistributedOptions(enabled=1), r"distributed enabled=1 must be True, False or None"),  # 1 == True
    (lambda: DistributedOptions(debug="yes"), r"distributed debug='yes' must be True, False or None"),
])
def test_a_count_or_size_that_is_no_valid_number_is_refused_when_built(build, message) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        build()
    assert "\n" not in str(refused.value)


def test_a_keep_checkpoints_that_is_no_integer_is_refused_before_the_run_folder(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"keep_checkpoints=1\.5"):
        trainer(run_dir=tmp_path / "runs", keep_checkpoints=1.5)
    assert not (tmp_path / "runs").exists()


def test_patience_0_stops_at_the_first_epoch_that_does_not_improve_as_patience_1_does() -> None:
    stopped = []
    for patience in (0, 1):
        fitted = trainer(lambda model: torch.optim.SGD(model.parameters(), lr=0.0),
                         early_stopping=EarlyStopping("val_loss", patience=patience))
        stopped.append(len(fitted.fit(batches(), batches(2, seed=1), epochs=5)))
    assert stopped == [2, 2]  # lr 0: epoch 2 does not improve on epoch 1


def test_a_nan_monitor_stops_at_once_with_the_reason_unless_check_finite_is_off(capsys) -> None:
    poisoned = batches(2, seed=1)
    poisoned[1][0][3, 2] = math.nan  # one value of the evaluation data: val_loss is NaN from epoch 1
    fitted = trainer(early_stopping=EarlyStopping("val_loss", patience=3), progress=True)
    assert len(fitted.fit(batches(), poisoned, epochs=6)) == 1
    said = capsys.readouterr()
    assert "early stopping: val_loss is nan at epoch 1: the model's outputs or the evaluation data" in (
        said.out + said.err)
    going_on = trainer(early_stopping=EarlyStopping("val_loss", patience=3, check_finite=False))
    assert len(going_on.fit(batches(), poisoned, epochs=6)) == 3  # NaN never improves: patience 3 runs out
    with pytest.raises(ConfigError, match=r"check_finite='yes'"):
        EarlyStopping(check_finite="yes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- monitors
@pytest.mark.parametrize(("options", "fit", "message"), [
    ({"early_stopping": "val_los"}, {}, r"early stopping's monitor='val_los' is no metric this fit logs: "
                                        r"did you mean 'val_loss'\? It logs epoch, lr, .*train_loss, val_accuracy, val_loss\.$"),
    ({"early_stopping": EarlyStopping("val_acuracy", mode="max")}, {},
     r"monitor='val_acuracy' .* did you mean 'val_accuracy'\?"),
    ({"checkpoint_monitor": ("val_los", "min")}, {}, r"checkpoint_monitor='val_los' .* did you mean 'val_loss'"),
    ({"early_stopping": "sample_per_s"}, {}, r"monitor='sample_per_s' .* did you mean 'samples_per_s'"),
    ({"early_stopping": "grad_norm"}, {}, r"monitor='grad_norm' is no metric this fit logs"),  # no clipping
    ({"early_stopping": "val_loss"}, {"val_loader": None}, r"monitor='val_loss' is no metric an evaluation "
                                                           r"logs: no evaluation set logs it: pass val_loader"),
    ({"early_stopping": "val/los"}, {"val_loader": {"val": batches(2)}, "max_steps": 4, "eval_every": 2},
     r"monitor='val/los' is no metric this fit logs: did you mean 'val/loss'\?"),
])
def test_a_misspelt_monitor_is_refused_with_did_you_mean_before_the_run_folder(tmp_path, options, fit,
                                                                               message) -> None:
    fitted = trainer(run_dir=tmp_path / "runs", metrics={"accuracy": lambda out, y: (out - y).abs().mean()},
                     **options)
    fit = {"val_loader": batches(2, seed=1), **fit}
    if "max_steps" in fit:
        fit["epochs"] = None
    refused_before_any_work(fitted, tmp_path, message, **fit)


def test_a_plateau_monitor_no_epoch_logs_is_refused_before_the_run_folder(tmp_path) -> None:
    fitted = trainer(scheduler=torch.optim.lr_scheduler.ReduceLROnPlateau, run_dir=tmp_path / "runs")
    refused_before_any_work(fitted, tmp_path, r"plateau_monitor='val_loss' is no metric an evaluation logs: no "
                                              r"evaluation set logs it: pass val_loader")


class AddsAMetric:
    """A user's callback that adds a metric to the epoch's logs, before early stopping reads them."""

    def on_epoch_end(self, trainer: Trainer, logs: dict[str, Any]) -> None:
        logs["val_custom"] = -float(trainer.epoch)


def test_a_metric_a_users_callback_may_add_is_left_to_the_epochs_end(tmp_path) -> None:
    fitted = trainer(run_dir=tmp_path / "runs", callbacks=[AddsAMetric()],
                     early_stopping=EarlyStopping("val_custom", patience=1))
    history = fitted.fit(batches(), batches(2, seed=1), epochs=3)
    assert [h["val_custom"] for h in history] == [0.0, -1.0, -2.0]  # improving: no stop
    typo = trainer(callbacks=[AddsAMetric()], early_stopping=EarlyStopping("val_custon", patience=1))
    with pytest.raises(ConfigError, match=r"monitors 'val_custon', but the epoch logged only .* did you mean "
                                          r"'val_custom'\?"):
        typo.fit(batches(), batches(2, seed=1), epochs=1)  # cannot be known before: refused at the epoch's end


def test_a_loss_term_known_only_once_the_loss_ran_is_left_to_the_epochs_end() -> None:
    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"mse": nn.functional.mse_loss(outputs, targets), "l1": nn.functional.l1_loss(outputs, targets)}

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    fitted = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn, device="cpu", threads=1,
                     progress=False, guard=False, early_stopping=EarlyStopping("val_loss_l1", patience=1))
    history = fitted.fit(batches(), batches(2, seed=1), epochs=1)
    assert "val_loss_l1" in history[0] and "train_l1" in history[0]


@pytest.mark.parametrize("options", [{}, {"clip_grad_norm": 1.0}])
def test_the_names_known_before_training_are_the_epochs_record(options) -> None:
    fitted = trainer(**options)
    logs = fitted.fit(batches(), epochs=1)[0]
    assert set(logs) == epoch_log_names(fitted)  # the names checked before training: kept in step with the record


# ---------------------------------------------------------------------------------------------- run_dir
@pytest.mark.parametrize("under", ["", "runs"])
def test_a_run_dir_that_is_a_file_is_refused_before_anything_is_written(tmp_path, under) -> None:
    file = tmp_path / "hostname"
    file.write_text("a file\n")
    run_dir = file / under if under else file
    with pytest.raises(ConfigError, match=r"run_dir='.*hostname.*' (is|is under '.*hostname', which is) not a "
                                          r"directory: pass a directory") as refused:
        trainer(run_dir=run_dir)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="not a directory"):
        new_run_folder(run_dir)  # the run folder's own check, should the file appear after the Trainer was built
    assert file.read_text() == "a file\n" and sorted(tmp_path.iterdir()) == [file]


def test_a_run_dir_that_turns_into_a_file_after_the_trainer_was_built_is_refused_when_fit_starts(tmp_path) -> None:
    fitted = trainer(run_dir=tmp_path / "runs")
    (tmp_path / "runs").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        fitted.fit(batches(), epochs=1)
    assert fitted.global_step == 0


# ---------------------------------------------------------------------------------------------- threads
@pytest.mark.parametrize("threads", [2**40, 1_000_000, max(MAX_THREADS, 4 * usable_cpus()) + 1])
def test_a_thread_count_beyond_the_ceiling_is_refused_naming_the_usable_cpus(threads) -> None:
    message = rf"threads={threads} is more than the \d+ threads allowed \(this process may use {usable_cpus()} CPUs\)"
    with pytest.raises(ConfigError, match=message):
        trainer(threads=threads)
    with pytest.raises(ConfigError, match=message):
        choose_threads(threads, apply=False)
    assert check_threads(MAX_THREADS) == MAX_THREADS  # a count up to the ceiling is honoured, as ever


def test_an_omp_num_threads_beyond_the_ceiling_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1000000")
    with pytest.raises(ConfigError, match=r"OMP_NUM_THREADS=1000000 is more than"):
        trainer(threads="auto")


# ---------------------------------------------------------------------------------------------- epochs and max_steps
@pytest.mark.parametrize(("epochs", "max_steps", "line", "steps"), [
    (1, 2, "max_steps=2 ends training before epochs=1 does, at step 2 in epoch 1 (4 steps per epoch)", 2),
    (3, 100, "epochs=3 ends training at step 12, before max_steps=100 (4 steps per epoch)", 12),
    (1, 4, None, 4),
])
def test_epochs_with_max_steps_says_which_one_ends_training(capsys, epochs, max_steps, line, steps) -> None:
    fitted = trainer(progress=True, progress_every_s=3600)
    fitted.fit(batches(), epochs=epochs, max_steps=max_steps)
    said = [text for text in capsys.readouterr().err.splitlines() if "fit stops at whichever comes first" in text]
    assert said == ([f"torchwork: {line}: fit stops at whichever comes first"] if line else [])
    assert fitted.global_step == steps


def test_keep_fp32_takes_one_name_a_class_or_any_iterable_of_them() -> None:
    assert StepOptions(keep_fp32="norm").keep_fp32 == ("norm",)
    assert StepOptions(keep_fp32=nn.LayerNorm).keep_fp32 == (nn.LayerNorm,)
    assert StepOptions(keep_fp32=(n for n in ["a", "b"])).keep_fp32 == ("a", "b")  # a generator read once
    assert len(trainer(callbacks=(c for c in [EarlyStopping()])).callbacks) >= 1
