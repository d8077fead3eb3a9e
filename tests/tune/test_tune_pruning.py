"""The pruning callback on a real Trainer and a real Optuna study: every epoch reported once, a resumed fit
reports its restored epochs first (with their recorded values) and none twice, a pruned fit stops early and
never at its last epoch."""

from __future__ import annotations

import optuna
import pytest
import torch
from torch import nn

from torchwork import Trainer
from torchwork.tune.pruning import PruningCallback, make_pruner

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _data(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 4, generator=generator), torch.randint(0, 2, (16,), generator=generator))
            for _ in range(4)]


def _trainer(run_dir, callback, lr: float = 0.1) -> Trainer:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=lr), nn.CrossEntropyLoss(), device="cpu",
                   callbacks=[callback], run_dir=run_dir, progress=False, guard=False)


def test_each_epoch_is_reported_once(tmp_path) -> None:
    study = optuna.create_study(pruner=make_pruner("none"))
    trial = study.ask()
    callback = PruningCallback(trial, "val_loss", epochs=3)
    _trainer(tmp_path, callback).fit(_data(0), _data(1), epochs=3)
    assert callback.reported == [0, 1, 2] and sorted(study.trials[0].intermediate_values) == [0, 1, 2]


def test_a_resumed_fit_reports_its_restored_epochs_once(tmp_path) -> None:
    first = optuna.create_study(pruner=make_pruner("none"))
    uninterrupted = PruningCallback(first.ask(), "val_loss", epochs=3)
    _trainer(tmp_path / "a", uninterrupted).fit(_data(0), _data(1), epochs=3)
    expected = first.trials[0].intermediate_values

    study = optuna.create_study(pruner=make_pruner("none"))
    _trainer(tmp_path / "b", PruningCallback(study.ask(), "val_loss", epochs=2)).fit(_data(0), _data(1), epochs=2)
    (run,) = [p for p in (tmp_path / "b").iterdir()]
    retry = PruningCallback(study.ask(), "val_loss", epochs=3)  # a fresh trial, as a retried attempt is
    trainer = _trainer(tmp_path / "b", retry)
    trainer.fit(_data(0), _data(1), epochs=3, resume=str(run))
    assert retry.resumed_epochs == 2 and retry.reported == [0, 1, 2]
    assert study.trials[1].intermediate_values == expected  # the same values, bit for bit


@pytest.mark.parametrize("pruner", ["percentile", "median", "hyperband"])
def test_a_worse_trial_is_pruned_before_its_last_epoch(tmp_path, pruner) -> None:
    # Hyperband puts each trial in a bracket by a hash of the study's name and the trial's number, and
    # compares a trial only with those of its bracket: a fixed name keeps the good trials beside the bad one
    # (Optuna's default name is random, so with it this test would pass or fail by chance).
    study = optuna.create_study(pruner=make_pruner(pruner, max_epochs=6, trials=4), study_name="pruning")
    for index in range(3):  # good trials finish first
        trial = study.ask()
        _trainer(tmp_path / f"good{index}", PruningCallback(trial, "val_loss", epochs=6)).fit(_data(0), _data(1), epochs=6)
        study.tell(trial, study.trials[-1].intermediate_values[5])
    trial = study.ask()
    callback = PruningCallback(trial, "val_loss", epochs=6)
    trainer = _trainer(tmp_path / "bad", callback, lr=1e-6)  # learns nothing: its loss stays high
    with torch.no_grad():  # and starts far worse than the others
        trainer.model.weight.mul_(40.0)
    history = trainer.fit(_data(0), _data(1), epochs=6)
    assert callback.pruned_at is not None and callback.pruned_at < 5 and len(history) == callback.pruned_at + 1
