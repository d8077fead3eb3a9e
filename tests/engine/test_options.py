"""engine/options.py: the flat keywords are typed, and stay the groups' fields."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from torchwork.engine import options


def test_the_typed_flat_keywords_are_exactly_the_groups_fields() -> None:
    assert set(typing.get_type_hints(options.TrainerKeywords, include_extras=False)) == set(options._FLAT)


@pytest.mark.slow
def test_a_type_checker_flags_a_misspelt_or_mistyped_flat_keyword(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torchwork import Trainer
        model = nn.Linear(2, 2)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), accumulate=4, clip_grad_norm=1.0)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), acumulate=4)
        Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(), accumulate="4")
    """))
    done = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                           "--no-incremental", "--no-error-summary", str(script)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, done.stdout
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
