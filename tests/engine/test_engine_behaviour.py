"""Modes, devices, batches, multi-task losses, clipping, prediction, callbacks and bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import EarlyStopping, Trainer
from torchwork.engine.metrics import accuracy
from torchwork.errors import BatchError, ConfigError, LossError


def batches(n: int = 4, size: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 8, generator=g), torch.randint(0, 2, (size,), generator=g)) for _ in range(n)]


def sgd(model: nn.Module, **kwargs) -> Trainer:
    loss_fn = kwargs.pop("loss_fn", nn.CrossEntropyLoss())
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn, device="cpu", progress=False,
                   **kwargs)


# ---------------------------------------------------------------- modes
def test_evaluation_restores_each_submodule_mode_and_frozen_batchnorm_stays_eval():
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    model[1].eval()  # a frozen BatchNorm: its running statistics must not move
    stats = model[1].running_mean.clone()
    seen_modes = []
    model[2].register_forward_pre_hook(lambda m, a: seen_modes.append(m.training))
    trainer = sgd(model)
    trainer.fit(batches(), val_loader=batches(2), epochs=2)
    assert model.training and model[2].training and not model[1].training
    assert torch.equal(model[1].running_mean, stats)
    # dropout trained in train mode and was evaluated in eval mode
    assert seen_modes == [True] * 4 + [False] * 2 + [True] * 4 + [False] * 2


def test_evaluate_and_predict_use_inference_mode_and_restore_modes():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    grad_enabled = []
    model[0].register_forward_hook(lambda m, a, o: grad_enabled.append(torch.is_inference_mode_enabled()))
    trainer = sgd(model)
    model.train()
    trainer.evaluate(batches(1))
    trainer.predict(batches(1))
    assert grad_enabled == [True, True] and model.training and model[1].training


def test_predict_batch_size_one_with_batchnorm_and_shapes():
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
    trainer = sgd(model)
    dataset = TensorDataset(torch.randn(5, 8), torch.zeros(5, dtype=torch.long))
    outputs = trainer.predict(DataLoader(dataset, batch_size=1))
    assert outputs.shape == (5, 3)
    bare = trainer.predict([torch.randn(2, 8), torch.randn(1, 8)])  # batches that are just inputs
    assert bare.shape == (3, 3)


# ---------------------------------------------------------------- devices and batches (engine/devices.py alone: test_devices.py)
def test_dict_and_tuple_inputs_reach_the_model():
    class TwoInputs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 2), nn.Linear(4, 2)

        def forward(self, x, z):
            return self.a(x) + self.b(z)

    y = torch.randint(0, 2, (6,))
    for inputs in [(torch.randn(6, 8), torch.randn(6, 4)), {"x": torch.randn(6, 8), "z": torch.randn(6, 4)}]:
        model = TwoInputs()
        before = model.a.weight.clone()
        sgd(model).fit([(inputs, y)], epochs=1)
        assert not torch.equal(before, model.a.weight)


def test_loss_module_weights_follow_the_model_device():
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0]))
    sgd(nn.Linear(8, 2), loss_fn=loss_fn)
    assert loss_fn.weight.device.type == "cpu"


# ---------------------------------------------------------------- losses, clipping, logs
def test_weighted_multi_task_losses_are_combined_and_logged():
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body, self.cls, self.reg = nn.Linear(8, 8), nn.Linear(8, 2), nn.Linear(8, 1)

        def forward(self, x):
            h = torch.relu(self.body(x))
            return {"logits": self.cls(h), "value": self.reg(h).squeeze(-1)}

    def loss_fn(outputs, targets):
        return {"cls": nn.functional.cross_entropy(outputs["logits"], targets),
                "reg": nn.functional.mse_loss(outputs["value"], targets.float())}

    model = TwoHeads()
    trainer = sgd(model, loss_fn=loss_fn, loss_weights={"cls": 1.0, "reg": 0.0})
    data = batches(3)
    history = trainer.fit(data, val_loader=data, epochs=1)
    logs = history[0]
    assert {"train_cls", "train_reg", "val_loss_cls", "val_loss_reg"} <= set(logs)
    # reg has weight 0: the regression head never learns
    before = model.reg.weight.clone()
    trainer.fit(data, epochs=2)
    assert torch.equal(before, model.reg.weight)

    with pytest.raises(LossError, match="loss_weights names"):
        sgd(TwoHeads(), loss_fn=loss_fn, loss_weights={"clss": 1.0}).step(data[0])


def test_clipping_logs_the_pre_clip_norm_and_bounds_the_update():
    torch.manual_seed(0)
    model = nn.Linear(8, 2)
    trainer = sgd(model, clip_grad_norm=1e-3, loss_fn=lambda out, y: (out * 1000).sum() / len(y))
    before = model.weight.detach().clone()
    history = trainer.fit(batches(1), epochs=1)
    assert history[0]["grad_norm"] > 1.0
    update = torch.cat([(model.weight - before).flatten()]).norm()
    assert update <= 0.1 * 1e-3 * 1.01


def test_step_logs_reach_loggers_and_callbacks():
    class Collect:
        def __init__(self) -> None:
            self.rows = []

        def log(self, metrics, step):
            self.rows.append((step, metrics))

    collect = Collect()
    calls = []

    class CB:
        def on_step_end(self, trainer, logs):
            calls.append(logs["step"])

    trainer = sgd(nn.Linear(8, 2), loggers=[collect], callbacks=[CB()], log_every_n_steps=2,
                  clip_grad_norm=10.0)
    trainer.fit(batches(4), epochs=1)
    assert calls == [1, 2, 3, 4]  # callbacks every step, loggers every log_every_n_steps
    assert [s for s, m in collect.rows if "loss" in m] == [2, 4]
    assert "grad_norm" in collect.rows[0][1] and "train_loss" in collect.rows[-1][1]


def test_early_stopping_stops_on_the_monitored_metric():
    model = nn.Linear(8, 2)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.0), nn.CrossEntropyLoss(), device="cpu",
                      metrics={"accuracy": accuracy}, progress=False,
                      early_stopping=EarlyStopping("val_accuracy", mode="max", patience=2))
    history = trainer.fit(batches(2), val_loader=batches(2), epochs=10)
    assert len(history) == 3  # lr 0: nothing improves after the first epoch


def test_step_fn_replaces_the_convention():
    model = nn.Linear(8, 1)

    def step_fn(model, batch):
        return ((model(batch["x"]).squeeze(-1) - batch["y"]) ** 2).mean()

    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), step_fn=step_fn, device="cpu",
                      progress=False)
    data = [{"x": torch.randn(8, 8), "y": torch.randn(8)} for _ in range(3)]
    history = trainer.fit(data, val_loader=data, epochs=3)
    assert history[-1]["val_loss"] < history[0]["val_loss"]


# ---------------------------------------------------------------- bad input, before the first step
def test_bad_input_is_refused_before_any_weight_changes():
    model = nn.Linear(8, 2)
    before = model.weight.clone()
    with pytest.raises(LossError, match="shape"):
        sgd(model, loss_fn=nn.CrossEntropyLoss(reduction="none")).fit(batches(1))
    with pytest.raises(BatchError, match="cannot split"):
        sgd(model).fit([torch.randn(4, 8)])
    with pytest.raises(BatchError, match="step_fn"):
        sgd(model).fit([(torch.randn(4, 8), torch.zeros(4, dtype=torch.long), torch.zeros(4))])
    with pytest.raises(LossError, match="not a tensor"):
        sgd(model, loss_fn=lambda o, y: 1.0).fit(batches(1))
    with pytest.raises(LossError, match="does not require grad"):
        sgd(model, loss_fn=lambda o, y: nn.functional.cross_entropy(o.detach(), y)).fit(batches(1))
    assert torch.equal(before, model.weight)


def test_bad_configuration_is_refused_at_construction():
    model, other = nn.Linear(8, 2), nn.Linear(8, 2)
    with pytest.raises(ConfigError, match="none of the model's parameters"):
        Trainer(model, torch.optim.SGD(other.parameters(), lr=0.1), nn.MSELoss(), device="cpu")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="accumulate"):
            Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), accumulate=bad)
    with pytest.raises(ConfigError, match="clip_grad_norm"):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), clip_grad_norm=-1)
    with pytest.raises(ConfigError, match="loss_fn"):
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.warns(UserWarning, match="not in the optimizer"):
        Trainer(model, torch.optim.SGD([model.weight], lr=0.1), nn.MSELoss(), device="cpu")


def test_empty_loader_is_a_clear_error():
    with pytest.raises(ConfigError, match="no batches"):
        sgd(nn.Linear(8, 2)).fit([])


def test_explain_lists_the_step_in_order(capsys):
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning):
        trainer = Trainer(model, opt, nn.CrossEntropyLoss(), torch.optim.lr_scheduler.StepLR(opt, 1),
                          device="cpu", precision="fp16", accumulate=4, clip_grad_norm=1.0)
    text = trainer.explain()
    order = ["zero_grad", "autocast", "loss_fn", "scaler.scale(loss).backward()", "unscale_",
             "clip_grad_norm_", "scaler.step", "scaler.update", "scheduler.step"]
    positions = [text.index(word) for word in order]
    assert positions == sorted(positions)
    assert "accumulate=4" in text
    assert capsys.readouterr().out == ""  # it returns the text; the caller decides where it goes


def test_cli_help_does_not_import_torch():
    code = ("import sys; from torchwork.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("NO-TORCH")


def test_epoch_metrics_see_the_whole_evaluation_set():
    from torchwork.engine.metrics import macro_f1

    model = nn.Linear(8, 2)
    trainer = sgd(model, epoch_metrics={"macro_f1": macro_f1})
    data = batches(3)
    logs = trainer.evaluate(data, prefix="val_")
    outputs = torch.cat([model(x) for x, _ in data]).detach()
    targets = torch.cat([y for _, y in data])
    from sklearn.metrics import f1_score
    assert logs["val_macro_f1"] == pytest.approx(f1_score(targets, outputs.argmax(1), average="macro"))
