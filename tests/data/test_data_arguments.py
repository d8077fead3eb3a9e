"""``torchwork data describe|profile``'s arguments are checked before the dataset is read or a worker started:
a seed outside [0, 2**32), a batch size past 2**20 and more workers than the machine can run (4 per usable CPU,
8 at least) are one line (exit 2); ``loader()`` and ``profile_loader()`` refuse them alike."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from torchwork.cli import main
from torchwork.data.loaders import loader
from torchwork.data.profile import profile_loader
from torchwork.errors import ConfigError


def _never(*args, **kwargs):
    raise AssertionError("the work started: the bad argument was not refused first")


@pytest.mark.parametrize(("argv", "message"), [
    (["describe", "tweets", "--seed", "-1"], "--seed=-1: must be >= 0."),
    (["describe", "digits", "--seed", "4294967296"], "--seed=4294967296: must be <= 4294967295"),
    (["profile", "digits", "--seed", "4294967296"], "--seed=4294967296: must be <= 4294967295"),
    (["profile", "digits", "--batch-size", "99999999999999999999"],
     "--batch-size 99999999999999999999: use 1 to 1048576 (2**20)."),
    (["profile", "digits", "--batch-size", "0"], "--batch-size 0: use 1 to 1048576"),
    (["profile", "digits", "--workers", "0,999999"], "--workers 0,999999: each count must be in [0, "),
    (["profile", "digits", "--workers", "-1"], "--workers -1: each count must be in [0, "),
    (["profile", "digits", "--batches", "0"], "--batches 0: use 1 to 100000."),
])
def test_a_bad_argument_is_one_line_before_the_dataset_is_read(monkeypatch, capsys, argv, message) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    monkeypatch.setattr("torchwork.data.profile.profile_loader", _never)
    assert main(["data", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"torchwork: error: {message}"), captured.err


def test_loader_refuses_a_batch_past_2_20_and_more_workers_than_it_may_start() -> None:
    from torchwork.data.loaders import check_loader_sizes, most_workers

    data = TensorDataset(torch.zeros(8, 2))
    with pytest.raises(ConfigError, match=r"^batch_size=99999999999999999999 must be an integer in \[1, 1048576\]"):
        loader(data, 99999999999999999999, num_workers=0)
    with pytest.raises(ConfigError, match=rf"^num_workers=999999 must be an integer in \[0, {most_workers()}\]"):
        loader(data, 4, num_workers=999999)
    assert most_workers() >= 8
    check_loader_sizes(2**20, most_workers())  # the caps themselves are allowed
    assert len(next(iter(loader(data, 2**20, num_workers=0)))[0]) == 8  # one batch of the whole dataset


def test_profile_loader_refuses_a_worker_count_before_measuring_any(monkeypatch) -> None:
    data = TensorDataset(torch.zeros(8, 2), torch.zeros(8, dtype=torch.long))
    monkeypatch.setattr("torchwork.data.loaders.loader", _never)  # no loader made, no worker started
    with pytest.raises(ConfigError, match=r"^num_workers=999999 must be an integer in \[0, "):
        profile_loader(data, 4, num_workers=[0, 999999], batches=1, warmup=0)
