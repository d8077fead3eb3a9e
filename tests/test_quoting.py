"""A refused value quoted in a message: short, and never a crash of its own."""

from __future__ import annotations

import pytest

from torchwork.quoting import quote_value


@pytest.mark.parametrize(("value", "quoted"), [
    (3, "3"), (True, "True"), (-2.5, "-2.5"), ("lr", "'lr'"), (None, "None"),
    (10**15, "1000000000000000"), (-(10**39), "-1e+39"), (10**39, "1e+39"), (10**308, "1e+308"),
    (10**309, "<an integer of 310 digits or so>"), (-(10**5000), "<an integer of 5001 digits or so>"),
    (list(range(65)), "<list of 65 items>"), ({i: i for i in range(100)}, "<dict of 100 items>"),
], ids=lambda value: type(value).__name__)  # pytest's own id of a 5,000-digit integer raises
def test_each_kind_of_value_is_quoted_in_a_short_readable_form(value, quoted) -> None:
    assert quote_value(value) == quoted


def test_a_long_text_keeps_its_start_and_end_and_says_its_length() -> None:
    text = "a" * 50 + "MIDDLE" + "z" * 50
    quoted = quote_value(text)
    assert quoted == f"'{'a' * 15}...{'z' * 7}' ({len(text) + 2} characters)"
    assert "MIDDLE" not in quoted and len(quote_value(text, limit=80)) < 110


def test_a_value_within_the_limit_is_its_repr_exactly() -> None:
    text = "x" * 38
    assert quote_value(text) == repr(text) and len(repr(text)) == 40
