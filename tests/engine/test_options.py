"""engine/options.py: the setting groups and the flat keywords they replace (typed, the groups' fields)."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest
import torch
from engine_helpers import batches, small_trainer
from type_check import type_errors

from torchwork import Trainer
from torchwork.engine import options
from torchwork.engine.options import DistributedOptions, EvaluationOptions, LoggingOptions, StepOptions
from torchwork.errors import ConfigError
from torchwork.runs.options import RunOptions


def test_the_typed_flat_keywords_are_exactly_the_groups_fields() -> None:
    assert set(typing.get_type_hints(options.TrainerKeywords, include_extras=False)) == set(options._FLAT)


@pytest.mark.slow
def test_a_type_checker_flags_a_misspelt_or_mistyped_flat_keyword(tmp_path: Path) -> None:
    errors, output = type_errors(tmp_path, """
        import torch
        from torch import nn
        from torchwork import Trainer
        model = nn.Linear(2, 2)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), accumulate=4, clip_grad_norm=1.0)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), acumulate=4)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), accumulate="4")
    """)
    assert len(errors) == 2, output
    assert 'Unexpected keyword argument "acumulate" for "Trainer"; did you mean "accumulate"?' in errors[0]
    assert 'Argument "accumulate" to "Trainer" has incompatible type "str"; expected "int"' in errors[1]


def test_settings_live_in_their_group_and_are_read_from_it() -> None:
    import torch
    from torch import nn

    from torchwork import StepOptions, Trainer

    model = nn.Linear(2, 2)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(),
                      step=StepOptions(accumulate=4, clip_grad_norm=1.0), early_stopping="val_loss",
                      progress=False, guard=False)
    assert trainer.accumulate == 4 and trainer.options["step"].accumulate == 4
    assert trainer.checkpoint_monitor == ("val_loss", "min")  # resolved into the run group, once
    assert trainer.early_stopping is trainer.options["evaluation"].early_stopping
    copied = {"accumulate", "clip_grad_norm", "log_every_n_steps", "progress", "run_dir", "early_stopping"}
    assert not copied & set(vars(trainer)), "settings copied onto the Trainer"
    with pytest.raises(AttributeError, match="read from trainer.options"):
        trainer.accumulate = 2


def test_the_constructor_has_at_most_15_parameters() -> None:
    assert len(inspect.signature(Trainer.__init__).parameters) - 1 <= 15  # self aside


def test_groups_and_flat_keywords_mean_the_same() -> None:
    grouped = small_trainer(step=StepOptions(accumulate=2, clip_grad_norm=1.0),
                       logging=LoggingOptions(log_every_n_steps=7, progress=False), run=RunOptions(keep_checkpoints=2),
                       evaluation=EvaluationOptions(early_stopping="val_loss"),
                       distributed=DistributedOptions(enabled=False))
    flat = small_trainer(accumulate=2, clip_grad_norm=1.0, log_every_n_steps=7, keep_checkpoints=2,
                    early_stopping="val_loss", distributed=False)
    for t in (grouped, flat):
        assert (t.accumulate, t.clip_grad_norm, t.log_every_n_steps, t.keep_checkpoints) == (2, 1.0, 7, 2)
        assert t.checkpoint_monitor == ("val_loss", "min") and t.guard.check_every == 7
    assert grouped.options["step"] == flat.options["step"]
    losses = []
    for t in (grouped, flat):
        torch.manual_seed(1)  # the same dropout masks for both
        losses.append([float(t.step(*batches(2, seed))) for seed in range(3)])
    assert losses[0] == losses[1]


def test_a_setting_given_twice_or_unknown_is_refused() -> None:
    with pytest.raises(ConfigError, match="accumulate= and step= both given"):
        small_trainer(step=StepOptions(), accumulate=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'acumulate'"):
        small_trainer(acumulate=2)
    with pytest.raises(ConfigError, match="log_every_n_steps=0"):
        LoggingOptions(log_every_n_steps=0)
