"""engine/trainer.py: where training is, read through the Trainer, kept in trainer.state only."""

from __future__ import annotations

import pytest
from engine_helpers import batches, small_trainer


@pytest.mark.parametrize("name", ["global_step", "skipped_steps", "epoch", "batch_in_epoch", "history"])
def test_the_counters_are_read_only_views_of_the_state(name: str) -> None:
    trainer = small_trainer(threads=1)
    trainer.fit(batches(2), epochs=1)
    assert getattr(trainer, name) == getattr(trainer.state, name)
    with pytest.raises(AttributeError):
        setattr(trainer, name, getattr(trainer, name))


def test_the_views_follow_the_state() -> None:
    trainer = small_trainer(threads=1)
    trainer.fit(batches(2), epochs=1)
    assert (trainer.global_step, trainer.epoch, trainer.batch_in_epoch) == (2, 1, 0)
    trainer.state.global_step = 7
    assert trainer.global_step == 7 and trainer.history is trainer.state.history
