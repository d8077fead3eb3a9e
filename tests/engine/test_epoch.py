"""engine/epoch.py: an epoch's running totals, typed, in the checkpoint's format; its windows and logs."""

from __future__ import annotations

import torch
from engine_helpers import batches, small_trainer

from torchwork.engine.epoch import EpochTotals, windows

CPU = torch.device("cpu")


def test_the_totals_keep_the_checkpoint_entry_they_had_as_a_dict() -> None:
    totals = EpochTotals.fresh(CPU, skipped_steps=3)
    totals.add(torch.tensor(2.0), 4, {"mse": torch.tensor(1.0)}, torch.tensor(0.5))
    totals.add(torch.tensor(1.0), 2, {"mse": torch.tensor(3.0)}, torch.tensor(1.5))
    entry = totals.state_dict()
    assert list(entry) == ["loss_sum", "samples", "steps", "norm_sum", "terms", "elapsed", "skipped_at_start"]
    assert (float(entry["loss_sum"]), entry["samples"], entry["steps"], float(entry["norm_sum"])) == (10.0, 6, 2, 2.0)
    assert float(entry["terms"]["mse"]) == 10.0 and entry["skipped_at_start"] == 3
    again = EpochTotals.from_state_dict(entry, CPU)
    assert again.state_dict().keys() == entry.keys()
    assert float(again.loss_sum) == 10.0 and float(again.terms["mse"]) == 10.0 and again.skipped_at_start == 3


def test_a_resumed_epoch_adds_to_the_totals_it_was_saved_with_not_to_copies_of_the_file() -> None:
    entry = EpochTotals.fresh(CPU, 0)
    entry.add(torch.tensor(1.0), 8, None, None)
    saved = entry.state_dict()
    again = EpochTotals.from_state_dict(saved, CPU)
    again.add(torch.tensor(3.0), 8, None, None)
    assert float(again.loss_sum) == 32.0 and again.steps == 2 and float(saved["loss_sum"]) == 8.0


def test_windows_group_batches_and_the_last_window_may_be_short() -> None:
    assert [list(w) for w in windows(range(5), 2)] == [[0, 1], [2, 3], [4]]
    assert [list(w) for w in windows(range(2), 1)] == [[0], [1]]


def test_a_trainer_mid_epoch_shows_its_totals_and_saves_them() -> None:
    seen: list[int] = []

    class Peek:
        def on_step_end(self, trainer, logs) -> None:
            seen.append(trainer.epoch_totals.steps)
            if logs["step"] == 2:
                assert trainer.state_dict()["epoch_totals"]["steps"] == 2

    trainer = small_trainer(threads=1, callbacks=[Peek()])
    trainer.fit(batches(3), epochs=1)
    assert seen == [1, 2, 3] and trainer.history[0]["steps"] == 3
