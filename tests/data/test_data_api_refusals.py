"""The public ``torchwork.data`` functions refuse a bad argument with one ConfigError, before any work: NaN,
inf and 10**400 fractions, seeds outside [0, 2**32), counts of 0 or of 5000 digits (whose repr Python itself
refuses), and floats or bools where a count goes. The message names the setting and what to pass instead."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from torchwork import data as D
from torchwork.errors import ConfigError, DataError

LABELS = [0, 1] * 50
IDS = np.array(LABELS)
TEXTS = [f"review number {i}" for i in range(20)]
WORDS = ["good", "bad"] * 10
HUGE = 10**5000  # its repr raises ValueError in Python 3.11: the message must not be built with it
SHOWN_HUGE = r"<an integer of 5001 digits or so>"


def _dataset() -> TensorDataset:
    return TensorDataset(torch.randn(10, 2))


BAD_FRACTIONS = [
    pytest.param((float("nan"), 0.1, 0.1), r"\(nan, 0\.1, 0\.1\)", id="nan"),
    pytest.param((float("inf"), 0.1, 0.1), r"\(inf, 0\.1, 0\.1\)", id="inf"),
    pytest.param((0.8, float("-inf"), 0.1), r"\(0\.8, -inf, 0\.1\)", id="minus-inf"),
    pytest.param((10**400, 0.1, 0.1), r"\(<an integer of 401 digits or so>, 0\.1, 0\.1\)", id="10**400"),
    pytest.param((HUGE, 0.1, 0.1), rf"\({SHOWN_HUGE}, 0\.1, 0\.1\)", id="10**5000"),
    pytest.param((1.2, -0.1, -0.1), r"\(1\.2, -0\.1, -0\.1\)", id="negative"),
    pytest.param((0.8, 0.2), r"\(0\.8, 0\.2\)", id="two"),
    pytest.param(0.8, r"0\.8", id="one-number"),
]


@pytest.mark.parametrize(("fractions", "shown"), BAD_FRACTIONS)
def test_split_fractions_are_refused(fractions, shown) -> None:
    message = rf"^fractions={shown} must be three finite, non-negative numbers that sum to 1, e\.g\. \(0\.8"
    with pytest.raises(ConfigError, match=message):
        D.stratified_split(LABELS, fractions)
    with pytest.raises(ConfigError, match=message):
        D.grouped_split(TEXTS, WORDS, fractions=fractions)


BAD_SEEDS = [
    pytest.param(-1, r"seed=-1: must be >= 0\.", id="-1"),
    pytest.param(2**32, r"seed=4294967296: must be <= 4294967295 \(2\*\*32 - 1", id="2**32"),
    pytest.param(HUGE, rf"seed={SHOWN_HUGE}: must be <= 4294967295", id="10**5000"),
    pytest.param(True, r"seed=True: use an integer in \[0, 4294967295\]", id="bool"),
    pytest.param(2.5, r"seed=2\.5: use an integer in \[0, 4294967295\]", id="float"),
]
SEEDED = [
    pytest.param(lambda seed: D.stratified_split(LABELS, seed=seed), id="stratified_split"),
    pytest.param(lambda seed: D.grouped_split(TEXTS, WORDS, seed=seed), id="grouped_split"),
    pytest.param(lambda seed: D.balanced_sampler(LABELS, seed=seed), id="balanced_sampler"),
    pytest.param(lambda seed: D.paired_macro_f1(IDS, IDS, IDS, 2, seed=seed), id="paired_macro_f1"),
    pytest.param(lambda seed: D.loader(_dataset(), 4, shuffle=True, seed=seed, num_workers=0), id="loader"),
]


@pytest.mark.parametrize("call", SEEDED)
@pytest.mark.parametrize(("seed", "message"), BAD_SEEDS)
def test_seeds_outside_numpys_range_are_refused(call, seed, message) -> None:
    with pytest.raises(ConfigError, match=rf"^{message}"):
        call(seed)


@pytest.mark.parametrize(("num_samples", "shown"), [
    pytest.param(0, "0", id="0"),
    pytest.param(-3, "-3", id="negative"),
    pytest.param(10**9 + 1, "1000000001", id="past-10**9"),
    pytest.param(HUGE, SHOWN_HUGE, id="10**5000"),
    pytest.param(2.0, r"2\.0", id="float"),
    pytest.param(True, "True", id="bool"),
])
def test_balanced_sampler_refuses_a_bad_num_samples(num_samples, shown) -> None:
    with pytest.raises(ConfigError, match=rf"^num_samples={shown} must be an integer in \[1, 1000000000\] "
                                          r"\(draws an epoch\), or None"):
        D.balanced_sampler(LABELS, num_samples=num_samples)


def test_balanced_sampler_refuses_more_draws_than_labels_without_replacement() -> None:
    with pytest.raises(ConfigError, match=r"^num_samples=101 draws without replacement from 100 labels"):
        D.balanced_sampler(LABELS, num_samples=101, replacement=False)
    with pytest.raises(ConfigError, match=r"^replacement=1 must be True or False\."):
        D.balanced_sampler(LABELS, replacement=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param(dict(rounds=HUGE), rf"rounds={SHOWN_HUGE} must be an integer in \[100, 100000\]", id="rounds-huge"),
    pytest.param(dict(rounds=0), r"rounds=0 must be an integer in \[100, 100000\] \(bootstrap", id="rounds-0"),
    pytest.param(dict(rounds=100_001), r"rounds=100001 must be an integer in \[100, 100000\]", id="rounds-past"),
    pytest.param(dict(rounds=1000.0), r"rounds=1000\.0 must be an integer", id="rounds-float"),
    pytest.param(dict(level=float("nan")), r"level=nan must be a number between 0 and 1 \(exclusive\), e\.g\. "
                                           r"0\.95", id="level-nan"),
    pytest.param(dict(level=float("inf")), r"level=inf must be a number between 0 and 1", id="level-inf"),
    pytest.param(dict(level=1.0), r"level=1\.0 must be a number between 0 and 1", id="level-1"),
    pytest.param(dict(level=True), r"level=True must be a number between 0 and 1", id="level-bool"),
    pytest.param(dict(num_classes=0), r"num_classes=0 must be an integer in \[1, 1000\]", id="classes-0"),
    pytest.param(dict(num_classes=HUGE), rf"num_classes={SHOWN_HUGE} must be an integer", id="classes-huge"),
    pytest.param(dict(num_classes=2.0), r"num_classes=2\.0 must be an integer", id="classes-float"),
])
def test_paired_macro_f1_refuses_a_bad_setting_before_resampling(monkeypatch, settings, message) -> None:
    def never(*args, **kwargs):
        raise AssertionError("the rows were read: the bad setting was not refused first")

    monkeypatch.setattr("torchwork.data.intervals.class_ids", never)
    arguments = {"num_classes": 2, **settings}
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.paired_macro_f1(IDS, IDS, IDS, **arguments)


def test_paired_macro_f1_refuses_rows_that_do_not_fit() -> None:
    with pytest.raises(ConfigError, match=r"predictions_a \(3\) .* must be the same, non-zero number of rows"):
        D.paired_macro_f1(IDS, IDS[:3], IDS, 2)
    with pytest.raises(DataError, match=r"^a class id 3 is >= the num_classes=2 given: pass num_classes=4"):
        D.paired_macro_f1(IDS * 3, IDS, IDS, 2)


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param(dict(batch_size=HUGE), rf"batch_size={SHOWN_HUGE} must be an integer in \[1, 1048576\]",
                 id="batch-huge"),
    pytest.param(dict(batch_size=2.5), r"batch_size=2\.5 must be an integer in \[1, 1048576\] \(2\*\*20\)\.",
                 id="batch-float"),
    pytest.param(dict(batch_size=True), r"batch_size=True must be an integer", id="batch-bool"),
    pytest.param(dict(batch_size=0), r"batch_size=0 must be an integer in \[1, 1048576\]", id="batch-0"),
    pytest.param(dict(prefetch_factor=0), r"prefetch_factor=0 must be an integer in \[1, 256\] \(batches each "
                                          r"worker loads ahead\), or None", id="prefetch-0"),
    pytest.param(dict(prefetch_factor=HUGE), rf"prefetch_factor={SHOWN_HUGE} must be an integer",
                 id="prefetch-huge"),
    pytest.param(dict(prefetch_factor=2.0), r"prefetch_factor=2\.0 must be an integer", id="prefetch-float"),
    pytest.param(dict(max_length=-1), r"max_length=-1 must be an integer in \[1, 1048576\] \(tokens kept of a "
                                      r"text, 2\*\*20\), or None for no cap\.", id="max-length-negative"),
    pytest.param(dict(max_length=0), r"max_length=0 must be an integer in \[1, 1048576\]", id="max-length-0"),
    pytest.param(dict(max_length=2**20 + 1), r"max_length=1048577 must be an integer", id="max-length-past"),
    pytest.param(dict(max_length=HUGE), rf"max_length={SHOWN_HUGE} must be an integer", id="max-length-huge"),
    pytest.param(dict(num_workers=HUGE), rf"num_workers={SHOWN_HUGE} must be an integer in \[0, ",
                 id="workers-huge"),
    pytest.param(dict(num_workers=1.5), r"num_workers=1\.5 must be an integer in \[0, ", id="workers-float"),
])
def test_loader_refuses_a_bad_setting(settings, message) -> None:
    arguments = {"batch_size": 4, "shuffle": True, "num_workers": 0, **settings}
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.loader(_dataset(), **arguments)


def test_good_calls_still_work() -> None:
    train, val, test = D.stratified_split(LABELS, (0.8, 0.1, 0.1), seed=2**32 - 1)
    assert (len(train), len(val), len(test)) == (80, 10, 10)
    assert [len(p) for p in D.stratified_split(LABELS, np.array([0.8, 0.1, 0.1], dtype=np.float32))] == [80, 10, 10]
    plan = D.grouped_split(TEXTS, WORDS, fractions=[0.6, 0.2, 0.2], seed=3)
    assert sorted(len(rows) for rows in plan.indices.values()) == [4, 4, 12]
    draws = list(D.balanced_sampler(LABELS, num_samples=np.int64(7), seed=3))
    assert len(draws) == 7 and draws == list(D.balanced_sampler(LABELS, num_samples=7, seed=3))
    assert len(list(D.balanced_sampler(LABELS, num_samples=100, replacement=False))) == 100
    result = D.paired_macro_f1(IDS, IDS, IDS, np.int64(2), rounds=100, level=0.9, seed=0)
    assert result["a"] == {"macro_f1": 1.0, "low": 1.0, "high": 1.0} and result["rounds"] == 100
    assert D.paired_macro_f1([0] * 5, [0] * 5, [0] * 5, 1, rounds=100)["a"]["macro_f1"] == 1.0
    batches = list(D.loader(_dataset(), np.int64(4), shuffle=True, seed=2**32 - 1, num_workers=0,
                            prefetch_factor=256, max_length=2**20))
    assert [len(batch[0]) for batch in batches] == [4, 4, 2]


@pytest.mark.parametrize(("power", "shown"), [(float("nan"), "nan"), (float("inf"), "inf"), (-1, "-1"),
                                              (10**400, "<an integer of 401 digits or so>")],
                         ids=["nan", "inf", "negative", "401-digits"])
def test_class_weights_refuses_a_power_that_is_no_finite_number_from_0(power, shown) -> None:
    with pytest.raises(ConfigError, match=rf"^power={shown} must be a finite number >= 0"):
        D.class_weights(LABELS, power=power)  # NaN passed 'power < 0' and made every weight NaN


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"batches": HUGE}, rf"batches={SHOWN_HUGE} must be an integer in \[1, ", id="batches-huge"),
    pytest.param({"rounds": 2.5}, r"rounds=2\.5 must be an integer in \[1, ", id="rounds-float"),
    pytest.param({"warmup": -1}, r"warmup=-1 must be an integer in \[0, ", id="warmup-negative"),
])
def test_profile_loader_refuses_a_count_before_any_loading(settings, message) -> None:
    with pytest.raises(ConfigError, match=rf"^{message}"):
        D.profile_loader(_dataset(), **settings)  # a 5,000-digit count raised ValueError from the message
