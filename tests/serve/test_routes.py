"""serve/routes.py: ``/predict``'s refusals and :func:`counted`'s bookkeeping, on requests built in memory
(the served routes end to end: test_serve_http.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from memory_requests import memory_request
from starlette.requests import Request

from torchwork.serve import ServeConfig, TorchPredictor
from torchwork.serve.repository import ModelSpec
from torchwork.serve.routes import counted, json_response, predict
from torchwork.serve.served_models import ServedModels


@pytest.fixture
def models() -> ServedModels:
    return ServedModels([ModelSpec("m", "1", TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,)))],
                        ServeConfig())


def detail(response) -> str:
    return json.loads(response.body)["detail"]


def test_predict_takes_only_a_body_declared_as_json(models):
    plain = asyncio.run(predict(models, memory_request({"Content-Type": "text/plain"}, b"{}")))
    missing = asyncio.run(predict(models, memory_request({}, b"{}")))
    assert plain.status_code == missing.status_code == 415
    assert "'text/plain' is not accepted" in detail(plain) and "no Content-Type header" in detail(missing)


def test_predict_answers_503_while_the_model_warms_up(models):
    response = asyncio.run(predict(models, memory_request({"Content-Type": "application/json"}, b'{"inputs": []}')))
    assert response.status_code == 503 and response.headers["retry-after"] == "1"


def test_counted_answers_an_unexpected_error_as_json_500_and_counts_it(models, caplog):
    async def broken(_: Request):
        raise RuntimeError("a bug")

    response = asyncio.run(counted(models, broken, "/predict")(memory_request({})))
    metrics = models.slots["m"].metrics
    assert response.status_code == 500 and "the server keeps serving" in detail(response)
    assert metrics.requests.values == {"500": 1} and models.slots["m"].in_flight == 0
    assert "unexpected error in POST /predict" in caplog.text


def test_counted_counts_each_answer_by_its_status(models):
    async def fine(_: Request):
        return json_response(200, b"{}")

    handler = counted(models, fine, "/predict")
    for _ in range(2):
        asyncio.run(handler(memory_request({})))
    assert models.slots["m"].metrics.requests.values == {"200": 2}
