"""torchwork.finite: the number and count checks every setting and record read goes through."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchwork.errors import ConfigError
from torchwork.finite import check_count, is_count, is_finite_number


@pytest.mark.parametrize(("value", "finite"), [
    (3, True), (0.5, True), (np.float32(0.5), True), (np.int64(3), True),  # numpy's scalars are numbers
    (float("nan"), False), (float("-inf"), False), (np.float32("nan"), False),
    (10**400, False),  # math.isfinite raises OverflowError on it
    (True, False), (np.bool_(True), False), ("1", False), (None, False), (torch.tensor(0.5), False),
], ids=lambda value: repr(value)[:20])
def test_is_finite_number(value, finite) -> None:
    assert is_finite_number(value) is finite


@pytest.mark.parametrize(("value", "counted"), [
    (1, True), (64, True), (np.int64(8), True), (torch.tensor(8), True),
    (0, False), (65, False), (2.0, False), (True, False), (np.bool_(True), False),
    (torch.tensor([1, 2]), False), ("8", False),  # an __index__ that refuses, and text
], ids=lambda value: repr(value)[:20])
def test_is_count_between_1_and_64(value, counted) -> None:
    assert is_count(value, 1, 64) is counted


def test_check_count_returns_a_python_int_or_names_the_setting() -> None:
    assert type(check_count(np.int64(8), "batch_size", 1, 64)) is int
    with pytest.raises(ConfigError, match=r"^rounds=<an integer of 5001 digits or so> must be an integer in "
                                          r"\[100, 100000\] \(resamples\)\.$"):
        check_count(10**5000, "rounds", 100, 100_000, " (resamples)")
