"""serve/schemas.py: request schemas, and the one-line messages a bad request gets."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from torchwork.serve.schemas import Limits, check_rectangular, request_model, validation_message


def message(model, body: str | bytes) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate_json(body)
    return validation_message(caught.value)


@pytest.mark.parametrize("body, expected", [
    ('{"inputs": [[1, 2, NaN]]}', "inputs[0][2]: Input should be a finite number (got nan)"),
    ('{"inputs": [[1, 2, Infinity]]}', "inputs[0][2]: Input should be a finite number (got inf)"),
    ('{"inputs": [[1, 2, -Infinity]]}', "inputs[0][2]: Input should be a finite number (got -inf)"),
    ('{"inputs": [[1, 2, 1e400]]}', "inputs[0][2]: Input should be a finite number"),
    ('{"inputs": [[1, 2, 1e39]]}', "inputs[0][2]: 1e+39 is outside the range of the model's input type"),
    ('{"inputs": [[1, 2, true]]}', "inputs[0][2]: Input should be a valid number"),
    ('{"inputs": [[1, 2, "3"]]}', "inputs[0][2]: Input should be a valid number"),
    ('{"inputs": [[1, 2]]}', "inputs[0]: List should have at least 3 items"),
    ('{"inputs": [[1, 2, 3, 4]]}', "inputs[0]: List should have at most 3 items"),
    ('{"inputs": [[1, 2, [3]]]}', "inputs[0][2]: Input should be a valid number"),
    ('{"inputs": []}', "inputs: List should have at least 1 item"),
    ('{"inputs": [[1, 2, 3], [1, 2, 3], [1, 2, 3]]}', "inputs: List should have at most 2 items"),
    ('{"inputs": [[1, 2, 3]], "extra": 1}', "extra: Extra inputs are not permitted"),
    ('{}', "inputs: Field required"),
    ('[[1, 2, 3]]', "body: Input should be an object like"),
    ('{"inputs": [[1, 2, 3]', "body: Invalid JSON"),
    ('', "body: Invalid JSON"),
    (b'{"inputs": [[1, 2, 3]]}\xff', "body: Invalid JSON"),
])
def test_tensor_request_errors_name_the_field(body, expected):
    model = request_model("tensor", (3,), "float32", Limits(max_items=2))
    assert expected in message(model, body)


def test_valid_tensor_request_and_integer_dtype_ranges():
    model = request_model("tensor", (2, 2), "float32", Limits())
    assert model.model_validate_json('{"inputs": [[[1, 2.5], [-0.0, 3e38]]]}').inputs == [[[1.0, 2.5], [-0.0, 3e38]]]
    ints = request_model("tensor", (2,), "int64", Limits())
    assert ints.model_validate_json('{"inputs": [[1, -5]]}').inputs == [[1, -5]]
    assert "inputs[0][1]: Input should be a valid integer" in message(ints, '{"inputs": [[1, 2.5]]}')
    assert "inputs[0][0]: " in message(ints, f'{{"inputs": [[{2**64}, 1]]}}')
    uint8 = request_model("tensor", (1,), "uint8", Limits())
    assert "inputs[0][0]: -1 is outside the range" in message(uint8, '{"inputs": [[-1]]}')


def test_text_request_limits():
    model = request_model("text", (), "float32", Limits(max_items=3, max_text_length=10))
    assert model.model_validate_json('{"inputs": ["hello", "\\u00e9t\\u00e9"]}').inputs == ["hello", "été"]
    assert "inputs[0]: String should have at least 1 character" in message(model, '{"inputs": [""]}')
    assert "inputs[1]: String should have at most 10 characters" in message(model, '{"inputs": ["a", "%s"]}' % ("x" * 11))
    assert "inputs[0]: Input should be a valid string" in message(model, '{"inputs": [3]}')
    assert "body: Invalid JSON" in message(model, '{"inputs": ["\\ud800"]}')  # a lone surrogate


def test_many_errors_are_summarized():
    model = request_model("tensor", (8,), "float32", Limits())
    text = message(model, json.dumps({"inputs": [["x"] * 8]}))
    assert text.count("Input should be a valid number") == 5 and text.endswith("and 3 more problem(s)")


def test_free_dimensions_must_be_rectangular():
    assert check_rectangular([[[1, 2], [3, 4]]], (None, None)) is None
    problem = check_rectangular([[[1, 2], [3, 4]], [[1, 2], [3]]], (None, None))
    assert problem.startswith("inputs[1][1]: has shape (1,) but inputs[1][0] has (2,)")
    assert check_rectangular([[1, 2, 3]], (3,)) is None
    schema = request_model("tensor", (None, 2), "float32", Limits(max_free_dim=3)).model_json_schema()
    assert schema["properties"]["inputs"]["items"]["maxItems"] == 3
