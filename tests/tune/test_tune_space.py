"""The space: parsed, validated against the recipe before any trial, params drawn from (seed, trial number)."""

from __future__ import annotations

import math

import pytest

from torchwork.errors import ConfigError
from torchwork.tune.space import Space
from torchwork.tune.target import RecipeTarget

SPACE = {"lr": {"low": 1e-3, "high": 0.1, "log": True}, "l2": {"low": 1e-6, "high": 1e-3, "log": True},
         "epochs": {"choices": [4, 8, 12]}, "max_length": {"low": 16, "high": 128, "step": 16}}


@pytest.fixture(scope="module")
def target() -> RecipeTarget:
    return RecipeTarget("sentiment", ["subset=300"])


def test_params_depend_on_seed_and_number_only(target) -> None:
    space = Space.from_mapping(SPACE, target.integer_fields)
    first = [space.params_for(n, seed=3) for n in range(8)]
    again = Space.from_mapping(dict(reversed(list(SPACE.items()))), target.integer_fields)  # file order is free
    assert [again.params_for(n, seed=3) for n in reversed(range(8))] == first[::-1]
    assert first != [space.params_for(n, seed=4) for n in range(8)]
    assert len({p["lr"] for p in first}) == 8  # distinct points


def test_params_stay_in_the_space_and_on_its_grid(target) -> None:
    space = Space.from_mapping(SPACE, target.integer_fields)
    for n in range(64):
        p = space.params_for(n, seed=0)
        assert 1e-3 <= p["lr"] <= 0.1 and 1e-6 <= p["l2"] <= 1e-3
        assert p["epochs"] in (4, 8, 12)
        assert isinstance(p["max_length"], int) and p["max_length"] % 16 == 0 and 16 <= p["max_length"] <= 128
    values = [space.params_for(n, seed=0)["lr"] for n in range(64)]
    # log-uniform: about half of the points lie below the geometric middle, 1e-2
    assert 20 <= sum(v < 1e-2 for v in values) <= 44


def test_distributions_accept_the_params(target) -> None:
    space = Space.from_mapping(SPACE, target.integer_fields)
    distributions = space.distributions()
    for n in range(16):
        for name, value in space.params_for(n, seed=1).items():
            assert distributions[name]._contains(distributions[name].to_internal_repr(value))


def test_unknown_setting_names_the_one_meant(target) -> None:
    with pytest.raises(ConfigError, match=r"unknown setting 'learing_rate' \(did you mean 'lr'\?\)"):
        target.check_space(Space.from_mapping({"learing_rate": {"low": 0.001, "high": 0.1}}))
    with pytest.raises(ConfigError, match=r"'weight_decay' \(did you mean 'l2'\?\)"):
        target.check_space(Space.from_mapping({"weight_decay": {"low": 0.001, "high": 0.1}}))


def test_settings_the_tuner_owns_are_refused(target) -> None:
    with pytest.raises(ConfigError, match="'threads' cannot be tuned"):
        target.check_space(Space.from_mapping({"threads": {"choices": [1, 2]}}))


@pytest.mark.parametrize("entry, message", [
    ({"low": 0.1, "high": 0.01}, "low .* must be below high"),
    ({"low": 0.0, "high": 0.1, "log": True}, "log range needs low > 0"),
    ({"low": 1, "high": 10, "step": 4}, "multiple of step"),
    ({"low": 1, "high": 10, "step": 0}, "step must be > 0"),
    ({"low": 1e-3, "high": 0.1, "log": True, "step": 0.01}, "either log or step"),
    ({"choices": []}, "non-empty list"),
    ({"choices": [1, 1]}, "repeat"),
    ({"low": 1e-3}, "needs both low and high"),
    ({"low": 1e-3, "hihg": 0.1}, r"unknown key 'hihg' \(did you mean 'high'\?\)"),
    ({"low": float("nan"), "high": 0.1}, "finite"),
    ({"low": "a", "high": 0.1}, "must be a number"),
    (0.1, "write a range"),
])
def test_unsampleable_entries_are_refused(entry, message) -> None:
    with pytest.raises(ConfigError, match=message):
        Space.from_mapping({"lr": entry})


def test_values_the_recipe_refuses_are_refused(target) -> None:
    space = Space.from_mapping({"lr": {"low": 0.0, "high": 0.1}, "epochs": {"choices": [0, 4]}},
                               target.integer_fields)
    with pytest.raises(ConfigError, match=r"refuses: epochs=0: must be >= 1; lr=0.0: must be > 0. Narrow"):
        target.check_space(space)


def test_integer_settings_need_integer_ranges(target) -> None:
    with pytest.raises(ConfigError, match="max_length is an integer setting"):
        Space.from_mapping({"max_length": {"low": 16.5, "high": 64}}, target.integer_fields)
    # a float setting keeps a float range even when written with integers
    space = Space.from_mapping({"lr": {"low": 0, "high": 1}}, target.integer_fields)
    assert not space.settings[0].integer and not math.isclose(space.params_for(0, 0)["lr"] % 1, 0)


def test_empty_or_non_mapping_space_is_refused() -> None:
    for data in ({}, [], "lr"):
        with pytest.raises(ConfigError, match="a space is a mapping"):
            Space.from_mapping(data)


# ------------------------------------------------------------------ the space file is read as data
def test_a_fifo_given_as_space_is_refused_as_a_fifo(tmp_path) -> None:
    import os
    import threading

    from torchwork.tune.space import read_space

    fifo = tmp_path / "space.yaml"
    os.mkfifo(fifo)
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            read_space(fifo)
            raised.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)  # a read that blocks fails the test, not the run
    thread.start()
    thread.join(20)
    if thread.is_alive():  # let the blocked reader go: a writer opening the FIFO releases it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert raised and isinstance(raised[0], ConfigError), raised
    assert str(raised[0]) == f"search space {fifo} is not a regular file (a FIFO); give a YAML file."


@pytest.mark.parametrize(("text", "words"), [
    ("a: &a [1e-3, 1e-2]\nlr: {choices: *a}\n", ("line 2: aliases (*a) are not supported in a search space",
                                                 "expand to billions", "write the values out")),
    ("lr: " + "{x: " * 5000 + "1" + "}" * 5000 + "\n", ("line 1: lists and mappings nested more than 64 deep",)),
    ("lr: {low: 1.0e-3,\n\thigh: 0.1}\n", ("is not valid YAML: line 2, column 1: found character '\\t'",)),
])
def test_a_space_that_is_not_yaml_data_is_refused_in_one_line(tmp_path, text, words) -> None:
    from torchwork.tune.space import read_space

    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        read_space(path)
    message = str(caught.value)
    assert message.startswith(f"search space {path}") and "\n" not in message and len(message) < 400, message
    for word in words:
        assert word in message, message
