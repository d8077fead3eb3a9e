"""serve/v2_routes.py: the repository routes' small JSON bodies, refused with one clear line each (the routes
served end to end: test_serve_v2.py, test_serve_repository.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import FastAPI
from memory_requests import memory_request

from torchwork.serve.v2_routes import V2Routes, add_model_control, path_parameters


def routes() -> V2Routes:
    return V2Routes(lambda name, version: None, lambda: [("a", "1", "READY"), ("b", "2", "LOADING")], "0.0")


def answer(response) -> tuple[int, object]:
    return response.status_code, json.loads(response.body)


@pytest.mark.parametrize(("body", "names"), [(b"", ["a", "b"]), (b'{"ready": true}', ["a"]), (b"{}", ["a", "b"])])
def test_the_index_lists_every_model_or_the_ready_ones(body, names):
    status, index = answer(asyncio.run(routes().index(memory_request(body=body))))
    assert status == 200 and [row["name"] for row in index] == names


@pytest.mark.parametrize("body", [b"[1]", b"not json", b'"ready"'])
def test_an_index_body_that_is_not_a_json_object_is_refused(body):
    status, document = answer(asyncio.run(routes().index(memory_request(body=body))))
    assert status == 400 and document["error"].startswith("the index request body must be a JSON object")


def load_handler(loaded: list):
    async def reload(name: str, version: str | None) -> str:
        loaded.append((name, version))
        return version or "7"

    app = FastAPI()
    add_model_control(app, lambda name: name == "a", reload, enabled=True)
    return next(route.endpoint for route in app.routes if route.path.endswith("/load"))


def load(body: bytes, loaded: list | None = None) -> tuple[int, object]:
    request = memory_request(body=body, path="/v2/repository/models/a/load", path_params={"name": "a"})
    return answer(asyncio.run(load_handler([] if loaded is None else loaded)(request)))


def test_a_load_names_its_version_or_takes_the_newest():
    loaded: list = []
    assert load(b"", loaded) == (200, {"name": "a", "version": "7", "state": "READY"})
    assert load(b'{"parameters": {"version": "3"}}', loaded)[1]["version"] == "3"
    assert loaded == [("a", None), ("a", "3")]


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"[1]", 400, "the load request body must be a JSON object"),
    (b'{"parameters": [1]}', 400, "the load request body must be a JSON object"),
    (b'{"parameters": {"v": "1"}}', 400, "parameters ['v'] are not taken"),
    (b'{"parameters": {"version": 3}}', 400, "parameters.version must be a string"),
    (b" " * 5000, 413, ""),
])
def test_a_load_body_that_cannot_be_read_is_refused_with_the_reason(body, status, message):
    loaded: list = []
    answered, document = load(body, loaded)
    assert answered == status and document["error"].startswith(message) and not loaded


def test_path_parameters_declares_each_parameter_once():
    assert [p["name"] for p in path_parameters("/v2/models/{name}/ready")["parameters"]] == ["name"]
