"""serve/app.py: ``create_app`` builds the routes one model is served on (``/predict``, the Open Inference
Protocol's, the probes; the docs only when asked), ready once warmed, predicting what the model computes and
refusing a malformed item with the field that is wrong. In-process (Starlette's test client), a tiny model."""

from __future__ import annotations

import time

import pytest
import torch
from fastapi.testclient import TestClient

from torchwork.serve import ServeConfig, TorchPredictor, create_app


def _paths(app: object) -> set[str]:
    return {getattr(route, "path", "") for route in getattr(app, "routes", [])}


@pytest.fixture
def tiny() -> tuple[torch.nn.Module, TorchPredictor]:
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
        model.bias.zero_()
    return model, TorchPredictor(model, item_shape=(3,), labels=["no", "yes"])


def test_one_model_gets_predict_the_v2_routes_and_the_probes_and_docs_only_when_asked(tiny) -> None:
    plain = _paths(create_app(tiny[1], ServeConfig(), name="tiny"))
    assert {"/predict", "/v2/models/{name}/infer", "/healthz", "/readyz", "/metrics"} <= plain
    assert not {"/docs", "/openapi.json"} & plain
    assert {"/docs", "/openapi.json"} <= _paths(create_app(tiny[1], ServeConfig(docs=True), name="tiny"))


def test_a_warmed_app_answers_what_the_model_computes_and_names_a_bad_item(tiny) -> None:
    model, predictor = tiny
    with TestClient(create_app(predictor, ServeConfig(), name="tiny")) as client:
        for _ in range(600):  # warming up runs on the event loop's side: ask until ready (a bound, not a timing)
            if client.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        answer = client.post("/predict", json={"inputs": [[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]]})
        refused = client.post("/predict", json={"inputs": [[1.0, 2.0]]})
    assert answer.status_code == 200
    with torch.no_grad():
        expected = torch.softmax(model(torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]])), dim=1)
    predictions = answer.json()["predictions"]
    assert [p["label"] for p in predictions] == ["no", "yes"]
    assert predictions[0]["probabilities"]["no"] == pytest.approx(float(expected[0, 0]), abs=1e-6)
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "inputs[0]"
