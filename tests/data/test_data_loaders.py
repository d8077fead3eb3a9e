"""loader(): seeded workers, persistent workers, pinning only for GPUs, padded text batches."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from torchwork.data import TextPreprocessor, default_num_workers, load_dataset, loader
from torchwork.data.loaders import available_cpus
from torchwork.errors import ConfigError, DataError


class RandomDraws(Dataset):
    """Each item draws from torch, NumPy and random: the worker seeds decide what comes out."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, torch.rand(()).item(), np.random.rand(), random.random()])


def _epoch(data: loader) -> torch.Tensor:
    return torch.cat(list(data))


def test_seeded_workers_repeat_and_differ_by_seed() -> None:
    first = _epoch(loader(RandomDraws(), 4, shuffle=True, seed=7, num_workers=2))
    again = _epoch(loader(RandomDraws(), 4, shuffle=True, seed=7, num_workers=2))
    other = _epoch(loader(RandomDraws(), 4, shuffle=True, seed=8, num_workers=2))
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    # Two workers must not draw the same NumPy numbers (the classic forked-seed bug).
    assert len(set(first[:, 2].tolist())) == 16


def test_worker_settings() -> None:
    digits = load_dataset("digits")
    with_workers = loader(digits.train, 32, num_workers=1, device="cpu")
    assert with_workers.persistent_workers and with_workers.worker_init_fn is not None
    assert not with_workers.pin_memory
    in_process = loader(digits.train, 32, num_workers=0, device="cuda")
    assert in_process.pin_memory and not in_process.persistent_workers
    assert loader(digits.train, 32, num_workers=0, device=None).pin_memory is False


def test_default_num_workers_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_num_workers() == max(0, min(8, available_cpus() - 1))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(os.cpu_count() or 1))
    assert default_num_workers() == 0


def test_text_batches_are_padded_ids_and_lengths() -> None:
    reviews = load_dataset("rotten_tomatoes")
    pre = TextPreprocessor.fit(reviews.train.texts, min_freq=2)
    (ids, lengths), labels = next(iter(loader(reviews.validation, 8, preprocessor=pre, max_length=50,
                                              num_workers=0)))
    assert ids.shape[0] == 8 and ids.shape[1] == int(lengths.max()) <= 50
    for row, length in zip(ids, lengths):
        assert (row[:length] != 0).all() and (row[length:] == 0).all()
    assert labels.tolist() == reviews.validation.labels[:8]


def test_balanced_loader_draws_minority_class_as_often() -> None:
    tweets = load_dataset("tweets")
    batches = loader(tweets.train, 256, balance=True, seed=0, num_workers=0,
                     collate_fn=lambda items: torch.tensor([label for _, label in items]))
    labels = torch.cat([b for _, b in zip(range(40), batches)])
    shares = torch.bincount(labels, minlength=3).float() / len(labels)
    assert torch.all((shares - 1 / 3).abs() < 0.03)


def test_bad_arguments_are_clear_errors() -> None:
    digits = load_dataset("digits")
    with pytest.raises(ConfigError, match="batch_size"):
        loader(digits.train, 0)
    with pytest.raises(ConfigError, match="not both"):
        loader(digits.train, 4, preprocessor=TextPreprocessor.fit(["a"], min_freq=1), collate_fn=list)
    with pytest.raises(DataError, match=".labels"):
        loader(RandomDraws(), 4, balance=True)
    with pytest.raises(DataError, match="empty"):
        loader(torch.utils.data.TensorDataset(torch.zeros(0)), 4)
