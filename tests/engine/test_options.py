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
