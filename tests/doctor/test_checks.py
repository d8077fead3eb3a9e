"""How a doctor check is declared (issue 50): its id, severity, helpers and ops in the class statement,
checked when the class is created; its own fields set in ``setup``, not in an ``__init__`` of its own.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from torchwork.doctor.checks import CHECK_IDS, HELPERS, REGISTRY, Check, load_checks
from torchwork.doctor.findings import SEVERITIES
from torchwork.doctor.session import Session


def _class(target: str) -> type[Check]:
    module, name = target.split(":")
    return getattr(importlib.import_module(f"torchwork.doctor.checks.{module}"), name)


@pytest.mark.parametrize("check_id", CHECK_IDS)
def test_each_check_declares_its_registered_id_and_sets_its_fields_in_setup(check_id: str) -> None:
    cls = _class(REGISTRY[check_id])
    assert (cls.id, cls.severity in SEVERITIES, set(cls.requires) <= set(HELPERS)) == (check_id, True, True)
    assert isinstance(cls.ops, frozenset)
    assert "__init__" not in vars(cls), f"{cls.__name__}: set the check's fields in setup(), not __init__"


@pytest.mark.parametrize("target", sorted(HELPERS.values()))
def test_the_helpers_have_no_id_and_no_init_of_their_own(target: str) -> None:
    cls = _class(target)
    assert cls.id == "" and "__init__" not in vars(cls)


def test_the_class_statement_sets_the_class_attributes_and_setup_runs_once_built() -> None:
    class Counting(Check, id="counting", severity="info", requires=("grads",), ops=frozenset({"dropout"})):
        def setup(self) -> None:
            self.seen = self.session

    assert (Counting.id, Counting.severity, Counting.requires, Counting.ops) == (
        "counting", "info", ("grads",), frozenset({"dropout"}))
    session = Session(checks=[])
    assert Counting(session).seen is session

    class Louder(Counting, severity="error"):  # a subclass keeps what it does not restate
        pass

    assert (Louder.id, Louder.severity, Louder.requires) == ("counting", "error", ("grads",))


def test_load_checks_builds_the_helpers_a_check_requires_first() -> None:
    session = Session(checks=[])
    built = load_checks(session, ["train-mode", "missing-zero-grad"])
    assert [type(c).__name__ for c in built] == ["GradTracker", "ForwardTracker", "MissingZeroGrad", "TrainMode"]
    assert sorted(session.helpers) == ["forwards", "grads"]


@pytest.mark.parametrize(("declared", "error", "says"), [
    ({"id": ""}, ValueError, "id must be a non-empty lowercase name"),
    ({"id": "Train Mode"}, ValueError, "not 'Train Mode'"),
    ({"id": 3}, TypeError, "id must be a string"),
    ({"severity": "fatal"}, ValueError, "severity must be one of error, warning, info, not 'fatal'"),
    ({"requires": ["grads"]}, TypeError, "requires must be a tuple"),
    ({"requires": ("gradients",)}, ValueError, "unknown helper(s) ['gradients']; the helpers are forwards, grads"),
    ({"ops": {"dropout"}}, TypeError, "ops must be a frozenset"),
    ({"ops": frozenset({1})}, TypeError, "ops must be a frozenset of torch function names"),
])
def test_a_wrong_declaration_fails_when_the_class_is_created(declared: dict[str, Any], error: type[Exception],
                                                              says: str) -> None:
    with pytest.raises(error) as raised:
        type("Wrong", (Check,), {}, **declared)
    assert str(raised.value).startswith("Wrong: ") and says in str(raised.value)


def test_a_wrong_class_attribute_fails_the_same_way() -> None:
    with pytest.raises(ValueError, match="severity must be one of"):
        type("Old", (Check,), {"id": "old", "severity": "critical"})
