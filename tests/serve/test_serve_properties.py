"""Property-based tests of POST /predict against the server's own OpenAPI schema: never a 5xx.

Bodies are generated with hypothesis from the request schema the running server publishes: valid ones
(which must answer 200, or 422 when the model's output overflows), valid ones with one part broken, any
JSON value at all (NaN and Infinity included) and arbitrary bytes. Every answer is JSON; every 4xx names
the field that was wrong.
"""

from __future__ import annotations

import http.client
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from serve_fixtures import ServerProcess

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def request_schema(server: ServerProcess) -> dict[str, Any]:
    spec = server.request("GET", "/openapi.json")[2]
    return spec["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]


def from_schema(schema: dict[str, Any], magnitude: float | None = None) -> st.SearchStrategy[Any]:
    """Values valid under the JSON-schema subset pydantic wrote (object, array, number, integer, string)."""
    kind = schema["type"]
    if kind == "object":
        return st.fixed_dictionaries({name: from_schema(sub, magnitude)
                                      for name, sub in schema["properties"].items()})
    if kind == "array":
        low = schema.get("minItems", 0)
        return st.lists(from_schema(schema["items"], magnitude), min_size=low,
                        max_size=min(schema.get("maxItems", low + 3), low + 3))
    if kind == "number":
        low, high = schema.get("minimum"), schema.get("maximum")
        if magnitude is not None:
            low, high = -magnitude, magnitude
        return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "string":
        low = schema.get("minLength", 0)
        return st.text(min_size=low, max_size=min(schema.get("maxLength", 20), 20))
    raise AssertionError(f"schema type {kind!r} not covered")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12)


def paths(value: Any, here: tuple = ()) -> list[tuple]:
    """Every place inside a JSON value (the value itself included)."""
    found = [here]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths(child, (*here, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths(child, (*here, index))
    return found


def replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replace(value[path[0]], path[1:], new)
    return copy


@st.composite
def broken(draw: st.DrawFn, valid: st.SearchStrategy[Any]) -> Any:
    """A valid body with one place replaced by any JSON value, or a key added."""
    body = draw(valid)
    if draw(st.booleans()):
        return {**body, draw(st.text(min_size=1, max_size=8).filter(lambda k: k != "inputs")): draw(json_values)}
    return replace(body, draw(st.sampled_from(paths(body))), draw(json_values))


class Client:
    """One keep-alive connection, reopened if the server closes it."""

    def __init__(self, server: ServerProcess) -> None:
        self.server, self.conn = server, server.connection(timeout=30)

    def post(self, body: bytes) -> tuple[int, Any]:
        for attempt in (1, 2):
            try:
                self.conn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
                response = self.conn.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = self.server.connection(timeout=30)
                if attempt == 2:
                    raise
        assert response.getheader("content-type") == "application/json", raw[:200]
        return response.status, json.loads(raw)


def check_answer(status: int, answer: Any, body: Any = None) -> None:
    assert status < 500, answer
    if status == 200:
        assert isinstance(answer["predictions"], list) and answer["predictions"]
        return
    assert status in (413, 422), answer
    # The field named first: from the structured errors when there are some (a key may itself hold ":").
    field = answer["errors"][0]["field"] if answer.get("errors") else answer["detail"].split(":")[0]
    assert answer["detail"].startswith(f"{field}: "), answer["detail"]
    keys = set(body) if isinstance(body, dict) else set()
    assert field.startswith(("body", "inputs")) or field in keys, answer["detail"]


@pytest.fixture(scope="module")
def digits_client(digits_server) -> Client:
    return Client(digits_server)


@pytest.fixture(scope="module")
def text_client(text_server) -> Client:
    return Client(text_server)


def dump(value: Any) -> bytes:
    return json.dumps(value).encode()  # NaN and Infinity are written as such: the server must refuse them


def test_valid_bodies_from_the_schema_are_answered(digits_server, digits_client, text_server, text_client):
    digits_valid = from_schema(request_schema(digits_server), magnitude=1e4)
    text_valid = from_schema(request_schema(text_server))

    @SETTINGS
    @given(digits_valid, text_valid)
    def check(digits_body, text_body):
        for client, body in ((digits_client, digits_body), (text_client, text_body)):
            status, answer = client.post(dump(body))
            assert status == 200, answer
            assert len(answer["predictions"]) == len(body["inputs"])
            for prediction in answer["predictions"]:
                assert math.isclose(sum(prediction["probabilities"].values()), 1.0, rel_tol=1e-5)

    check()


def test_any_in_range_numbers_never_break_the_server(digits_server, digits_client):
    @SETTINGS
    @given(from_schema(request_schema(digits_server)))
    def check(body):
        status, answer = digits_client.post(dump(body))
        check_answer(status, answer, body)
        if status == 422:  # finite numbers this large can overflow the model: the item is named
            assert "the model's output for this item is not a finite number" in answer["detail"]

    check()


def test_broken_bodies_and_any_json_get_a_4xx_naming_the_field(digits_server, digits_client, text_server,
                                                               text_client):
    digits_valid = from_schema(request_schema(digits_server), magnitude=1e4)
    text_valid = from_schema(request_schema(text_server))

    @SETTINGS
    @given(st.one_of(broken(digits_valid), json_values), st.one_of(broken(text_valid), json_values))
    @example({"inputs": [[0.0] * 64], ":": None}, {"inputs": ["a text"], "a: b": 1})  # keys holding ":"
    def check(digits_body, text_body):
        for client, body in ((digits_client, digits_body), (text_client, text_body)):
            status, answer = client.post(dump(body))
            check_answer(status, answer, body)

    check()


def test_arbitrary_bytes_get_a_4xx(digits_client, text_client):
    @SETTINGS
    @given(st.binary(max_size=300) | st.text(max_size=100).map(str.encode))
    def check(raw):
        for client in (digits_client, text_client):
            status, answer = client.post(raw)
            check_answer(status, answer)

    check()
