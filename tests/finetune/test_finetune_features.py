"""Frozen-prefix feature caching: the cache equals the bottom's outputs, training the top on it equals
training the whole model with the bottom frozen, and a kept cache is reused only while it is valid."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torchwork import Trainer
from torchwork.errors import ConfigError
from torchwork.finetune import CachedFeatures, cache_features, collate_cached, freeze


def parts() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    bottom = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5))
    bottom.train()(torch.randn(32, 6))  # pretrained statistics
    top = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    freeze(bottom)
    return bottom, top


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(40, 6, generator=g), torch.randint(0, 3, (40,), generator=g))


def test_the_cache_holds_the_bottoms_eval_outputs_in_order():
    bottom, _ = parts()
    data = dataset()
    cached = cache_features(bottom, data, batch_size=16, progress=False)
    assert bottom.training  # its mode is given back
    with torch.no_grad():
        expected = bottom.eval()(data.tensors[0])
    assert torch.equal(cached.features, expected) and torch.equal(cached.targets, data.tensors[1])


def test_training_the_top_on_the_cache_equals_training_the_whole_model_with_the_bottom_frozen():
    bottom, top = parts()
    data = dataset()
    whole = nn.Sequential(bottom, top)
    reference_top = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    reference_top.load_state_dict(top.state_dict())
    reference = nn.Sequential(bottom, reference_top)

    cached = cache_features(bottom, data, batch_size=16, progress=False)
    Trainer(top, torch.optim.SGD(top.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
            progress=False).fit(DataLoader(cached, batch_size=8), epochs=2)
    bottom.eval()  # as the cache saw it (Dropout off too); fit keeps each submodule's mode
    Trainer(reference, torch.optim.SGD(reference_top.parameters(), lr=0.1), nn.CrossEntropyLoss(),
            device="cpu", progress=False).fit(DataLoader(data, batch_size=8), epochs=2)
    for a, b in zip(top.parameters(), reference_top.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not torch.equal(whole[1][0].weight, parts()[1][0].weight)  # it did train


def test_a_kept_cache_is_reused_only_while_the_weights_and_data_match(tmp_path):
    bottom, _ = parts()
    data = dataset()
    path = tmp_path / "train.safetensors"
    first = cache_features(bottom, data, path=path, progress=False)
    assert path.is_file()
    again = cache_features(bottom, data, path=path, progress=False)
    assert again.fingerprint == first.fingerprint and torch.equal(again.features, first.features)
    with torch.no_grad():
        bottom[0].weight.add_(1.0)  # new weights: the old cache is stale
    fresh = cache_features(bottom, data, path=path, progress=False)
    assert fresh.fingerprint != first.fingerprint and not torch.equal(fresh.features, first.features)
    assert CachedFeatures.load(path).fingerprint == fresh.fingerprint


def test_tuple_features_of_different_lengths_are_padded_and_passed_as_arguments():
    class Encoder(nn.Module):
        def forward(self, x):
            return x * 2, (x != 0).long()

    class Top(nn.Module):  # takes the features as two arguments, like MiniLMTop(hidden, attention_mask)
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(1, 2)

        def forward(self, hidden, mask):
            return self.fc((hidden * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True))

    batches = [(torch.ones(2, 3), torch.tensor([0, 1])), (torch.ones(2, 5), torch.tensor([1, 0]))]
    cached = cache_features(Encoder(), DataLoader(batches, batch_size=None), progress=False)
    (hidden, mask), target = cached[0]
    assert hidden.shape == (5,) and mask.tolist() == [1, 1, 1, 0, 0] and int(target) == 0
    top = Top()
    history = Trainer(top, torch.optim.SGD(top.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                      progress=False).fit(DataLoader(cached, batch_size=2, collate_fn=collate_cached), epochs=1)
    assert history[0]["samples"] == 4


def test_a_dataset_of_tuple_inputs_reaches_the_bottom_as_arguments():
    class Bottom(nn.Module):
        def forward(self, ids, mask):
            return ids * mask

    items = [((torch.full((3,), float(i)), torch.tensor([1.0, 1.0, 0.0])), i % 2) for i in range(5)]
    cached = cache_features(Bottom(), items, batch_size=2, progress=False)
    assert cached.features[4].tolist() == [4.0, 4.0, 0.0] and cached.targets.tolist() == [0, 1, 0, 1, 0]


def test_a_trainable_bottom_or_a_shuffled_loader_is_refused():
    bottom, _ = parts()
    with pytest.raises(ConfigError, match="shuffle=False"):
        cache_features(bottom, DataLoader(dataset(), shuffle=True), progress=False)
    bottom[0].weight.requires_grad_(True)
    with pytest.raises(ConfigError, match="trainable parameter"):
        cache_features(bottom, dataset(), progress=False)


def test_a_bf16_cache_runs_the_bottom_under_autocast_and_stores_float32(tmp_path):
    class Bottom(nn.Module):  # returns (hidden, mask): the mask's integers must pass through untouched
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(6, 16)

        def forward(self, x):
            return self.linear(x), (x > 0).long()

    bottom = Bottom()
    freeze(bottom)
    data = [((torch.randn(6),), 0) for _ in range(10)]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = bottom(torch.stack([x for (x,), _ in data]))[0].float()
    path = tmp_path / "cache.safetensors"
    bf16 = cache_features(bottom, data, batch_size=4, progress=False, precision="bf16", path=path)
    hidden, mask = bf16.features
    assert hidden.dtype == torch.float32 and mask.dtype == torch.long
    assert torch.equal(hidden, expected)
    fp32 = cache_features(bottom, data, batch_size=4, progress=False, path=path)  # not the bf16 cache again
    assert fp32.fingerprint != bf16.fingerprint and not torch.equal(fp32.features[0], hidden)
    torch.testing.assert_close(fp32.features[0], hidden, rtol=2e-2, atol=2e-2)
    with pytest.raises(ConfigError, match="precision='16'"):
        cache_features(bottom, data, precision="16")


def _sequence_items() -> list:
    """Token-like rows of different lengths, in batches whose widths differ (as a length-bucketed loader makes)."""
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(2 + i % 5, 3, generator=generator), i % 2) for i in range(11)]


class _Widths(nn.Module):
    """A frozen 'bottom' that returns its padded input and the padding mask (what MiniLM's bottom returns)."""

    def forward(self, padded, mask):
        return padded * 2, mask


def _padded_batches(items, size):
    from torch.utils.data import DataLoader

    def collate(batch):
        longest = max(x.shape[0] for x, _ in batch)
        padded = torch.stack([nn.functional.pad(x, [0, 0, 0, longest - x.shape[0]]) for x, _ in batch])
        mask = torch.stack([(torch.arange(longest) < x.shape[0]).long() for x, _ in batch])
        return (padded, mask), torch.tensor([y for _, y in batch])

    return DataLoader(items, batch_size=size, shuffle=False, collate_fn=collate)


def test_a_ragged_cache_holds_the_same_rows_as_the_padded_one_in_less_memory() -> None:
    items = _sequence_items()
    padded = cache_features(_Widths(), _padded_batches(items, 3), progress=False)
    ragged = cache_features(_Widths(), _padded_batches(items, 3), progress=False, ragged=True)
    assert len(ragged) == len(padded) == 11 and torch.equal(ragged.targets, padded.targets)
    for index in [*range(11), -1]:
        (h, m), y = ragged[index]
        (hp, mp), yp = padded[index]
        width = h.shape[0]
        assert torch.equal(h, hp[:width]) and torch.equal(m, mp[:width]) and y == yp
        assert not mp[width:].any()  # what the padded cache holds beyond is padding only
    stored = sum(b[0].numel() for b in ragged.batches)
    assert stored < padded.features[0].numel()
    with pytest.raises(IndexError):
        ragged[11]


def test_a_ragged_cache_stays_in_memory_and_says_so(tmp_path) -> None:
    from torchwork.errors import ConfigError

    items = _sequence_items()
    with pytest.raises(ConfigError, match="in memory only"):
        cache_features(_Widths(), _padded_batches(items, 3), progress=False, ragged=True, path=tmp_path / "c")
    ragged = cache_features(_Widths(), _padded_batches(items, 3), progress=False, ragged=True)
    with pytest.raises(ConfigError, match="index its rows"):
        _ = ragged.features
    with pytest.raises(ConfigError, match="in memory only"):
        ragged.save(tmp_path / "c")
    assert not list(tmp_path.iterdir())


def test_a_bf16_stored_ragged_cache_halves_the_features_and_reads_rows_as_float32() -> None:
    """storage="bf16": the batches hold bfloat16 (the mask's integers untouched), half the fp32 cache's bytes,
    and each row reads back as float32 equal to the fp32 cache's row rounded to bfloat16."""
    items = _sequence_items()
    fp32 = cache_features(_Widths(), _padded_batches(items, 3), progress=False, ragged=True)
    half = cache_features(_Widths(), _padded_batches(items, 3), progress=False, ragged=True, storage="bf16")
    assert all(h.dtype == torch.bfloat16 and m.dtype == torch.long for h, m in half.batches)
    assert 2 * sum(h.nbytes for h, _ in half.batches) == sum(h.nbytes for h, _ in fp32.batches)
    for index in range(len(items)):
        (h, m), y = half[index]
        (h32, m32), y32 = fp32[index]
        assert h.dtype == torch.float32 and torch.equal(h, h32.bfloat16().float())
        assert torch.equal(m, m32) and y == y32
    assert not torch.equal(half[0][0][0], fp32[0][0][0])  # rounded: the test data is not bf16-exact
    with pytest.raises(ConfigError, match="storage='bf16'"):  # a padded or saved cache keeps float32
        cache_features(_Widths(), _padded_batches(items, 3), progress=False, storage="bf16")
    with pytest.raises(ConfigError, match="storage='8'"):
        cache_features(_Widths(), _padded_batches(items, 3), progress=False, ragged=True, storage="8")
