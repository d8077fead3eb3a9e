"""engine/modes.py: each submodule's train/eval flag kept by fit, frozen BatchNorm kept in eval."""

from __future__ import annotations

import torch
from engine_helpers import batches
from torch import nn

from torchwork import Trainer
from torchwork.engine.modes import TrainModes, evaluating, keep_frozen_norms_in_eval
from torchwork.engine.precision import resolve_precision
from torchwork.finetune import freezing


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.1), nn.Linear(8, 1))


def test_a_module_left_in_eval_by_the_user_is_kept_in_eval_at_each_epoch_start() -> None:
    model = _net()
    model[2].eval()  # the user's choice: no dropout
    modes = TrainModes(model)
    modes.capture()
    model.eval()  # an evaluation
    modes.restore()
    assert [m.training for m in model] == [True, True, False, True]


def test_a_model_left_wholly_in_eval_trains_all_of_it() -> None:
    model = _net().eval()
    modes = TrainModes(model)
    modes.capture()
    assert all(m.training for m in model.modules())


def test_restore_keeps_a_frozen_batchnorm_in_eval_and_lets_an_unfrozen_one_train_again() -> None:
    model = _net()
    modes = TrainModes(model)
    modes.capture()
    model[1].requires_grad_(False)
    modes.restore()
    assert not model[1].training
    model[1].requires_grad_(True)
    modes.restore()
    assert model[1].training


def test_fit_does_not_move_a_frozen_batchnorms_statistics() -> None:
    model = _net()
    model[1].requires_grad_(False)
    before = model[1].running_mean.clone()
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), device="cpu",
                      progress=False, threads=1)
    trainer.fit(batches(3), epochs=1)
    assert torch.equal(model[1].running_mean, before) and trainer.global_step == 3


def test_evaluating_puts_every_flag_back_and_runs_without_autograd() -> None:
    model = _net()
    model[2].eval()
    with evaluating(model, resolve_precision("32", torch.device("cpu"))):
        assert not any(m.training for m in model.modules())
        assert torch.is_inference_mode_enabled()
    assert [m.training for m in model] == [True, True, False, True]


def test_finetune_exports_the_one_definition() -> None:
    assert freezing.keep_frozen_norms_in_eval is keep_frozen_norms_in_eval
