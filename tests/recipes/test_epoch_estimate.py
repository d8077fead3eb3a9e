"""The epoch estimate printed before a transformer trains (recipes/epoch_estimate.py): what it counts, and
that timing it changes nothing the training then sees."""

from __future__ import annotations

import torch
from torch import nn

from torchwork.recipes.buckets import pad_batch
from torchwork.recipes.epoch_estimate import batch_shapes, epoch_estimate
from torchwork.recipes.transformer_texts import length_loader


class _Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.drop, self.head = nn.Embedding(50, 8), nn.Dropout(0.5), nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = (self.embed(ids) * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return self.head(self.drop(pooled))


def _loaders() -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 20, (90,), generator=generator).tolist()
    rows = [(torch.randint(1, 50, (n,), generator=generator).tolist(), i % 3) for i, n in enumerate(lengths)]
    train = length_loader(rows[:60], lengths[:60], 8, True, 0, pad_batch)
    validation = length_loader(rows[60:], lengths[60:], 16, False, 0, pad_batch)
    return train, validation


def test_batch_shapes_are_the_distinct_rows_and_padded_widths() -> None:
    assert batch_shapes([[0, 1], [2, 3], [4]], [5, 9, 9, 9, 3]) == {(2, 9), (1, 3)}
    assert batch_shapes([[0, 1], [1, 0]], [4, 7]) == {(2, 7)}


def test_the_estimate_adds_up_and_leaves_the_shuffle_rng_and_weights_as_they_were() -> None:
    torch.manual_seed(1)
    model, (train, validation) = _Bag(), _loaders()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    first_order = [list(b) for b in train.batch_sampler]
    train.batch_sampler.epoch = 0
    rng = torch.get_rng_state()

    estimate = epoch_estimate(model, train, validation, nn.CrossEntropyLoss(), torch.device("cpu"), "bf16",
                              epochs=4, batches=3)

    assert [list(b) for b in train.batch_sampler] == first_order  # training sees the shuffle it would have
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    shapes = len(batch_shapes(first_order, train.batch_sampler.lengths))
    assert estimate["batch_shapes"] == shapes
    one_off = estimate["new_shape_s"] * shapes
    assert estimate["first_epoch_s"] == estimate["step_s"] * len(train) + estimate["validation_s"] + one_off
    assert abs(estimate["epoch_s"] - (estimate["first_epoch_s"] - one_off * 3 / 4)) < 1e-9
    assert 0 < estimate["step_s"] and 0 < estimate["validation_s"]
