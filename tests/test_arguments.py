"""torchwork.arguments: a flag is a bool, and a list of names may be one name."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from torchwork.arguments import MAX_NAMES, check_flag, name_list
from torchwork.errors import ConfigError


def test_a_string_is_one_name_and_any_iterable_of_strings_is_several() -> None:
    assert name_list("onnx", "variants") == ("onnx",)
    assert name_list(["onnx", "pt2"], "variants") == ("onnx", "pt2")
    assert name_list(iter(("a", "b")), "x") == ("a", "b") and name_list({"a": 1}, "x") == ("a",)
    assert name_list((), "x") == () and name_list(None, "x") is None


@pytest.mark.parametrize(("value", "message"), [
    pytest.param(5, r"^x=5: give a name or a list of names", id="int"),
    pytest.param(b"onnx", r"^x=b'onnx': give a name", id="bytes"),
    pytest.param(["ok", None], r"^x: None is no name", id="none-item"),
    pytest.param(["ok", "  "], r"^x: '  ' is no name", id="blank-item"),
    pytest.param(itertools.count(), r"^x: 0 is no name", id="endless-ints"),
    pytest.param(itertools.repeat("a"), rf"^x: more than {MAX_NAMES:,} names", id="endless-names"),
])
def test_what_is_no_list_of_names_is_refused(value, message) -> None:
    with pytest.raises(ConfigError, match=message):
        name_list(value, "x")


def test_a_flag_is_a_bool() -> None:
    assert check_flag(False, "f") is False and check_flag(np.bool_(True), "f") is True
    for value in ("no", 0, 1, None, 1.0):
        with pytest.raises(ConfigError, match=r"^f=.*: pass True or False\.$"):
            check_flag(value, "f")
