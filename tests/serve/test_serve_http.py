"""A real ``torchwork serve`` process on a free loopback port, driven over HTTP by concurrent clients."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import numpy as np
from serve_fixtures import metric_value, parallel, probabilities
from serve_models import (
    DIGIT_LABELS,
    TEXT_LABELS,
    digits_torch_predictor,
    sentences,
    slow_model,
    text_predictor,
)


# ---------------------------------------------------------------- correct answers under concurrency
def test_concurrent_text_requests_all_answer_200_and_match_in_process(text_server, models_dir):
    texts, _ = sentences(120, seed=7)
    requests = [texts[i:i + 1 + i % 3] for i in range(0, 120, 2)]  # 60 requests of 1 to 3 texts
    local = text_predictor(str(models_dir))
    results = parallel(lambda inputs: text_server.predict(inputs), requests, workers=24)
    for inputs, (status, _, body) in zip(requests, results):
        assert status == 200, body
        assert len(body["predictions"]) == len(inputs)
        expected = local.predict_batch(inputs)
        for prediction, row in zip(body["predictions"], expected):
            np.testing.assert_allclose(probabilities(prediction, TEXT_LABELS), row, atol=1e-5)
    metrics = text_server.metrics()
    assert metric_value(metrics, 'torchwork_requests_total{status="200"}') >= 60
    assert metric_value(metrics, "torchwork_batch_size_sum") >= sum(len(r) for r in requests)


def test_concurrent_digit_requests_on_onnx_runtime_match_in_process(digits_server, models_dir):
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.data[:100] / 16.0).tolist()
    local = digits_torch_predictor(str(models_dir))  # the same weights, run by PyTorch
    results = parallel(lambda i: digits_server.predict([pixels[i]]), range(100), workers=32)
    predicted = []
    for i, (status, _, body) in enumerate(results):
        assert status == 200, body
        row = probabilities(body["predictions"][0], DIGIT_LABELS)
        np.testing.assert_allclose(row, local.predict_batch([pixels[i]])[0], atol=1e-5)
        predicted.append(int(body["predictions"][0]["label"]))
    assert (np.array(predicted) == digits.target[:100]).mean() > 0.9


# ---------------------------------------------------------------- bad requests beside good ones
GOOD_PIXELS = [0.5] * 64
BAD_DIGIT_REQUESTS = [
    # (body, status, words the message must contain)
    (b'{"inputs": [[0.5, 0.5', 422, "body: Invalid JSON"),
    (b"[1, 2, 3]", 422, "body: Input should be an object"),
    (b"", 422, "body: Invalid JSON"),
    (b'\xff\xfe{"inputs": 1}', 422, "body: Invalid JSON"),
    (b"{}", 422, "inputs: Field required"),
    (json.dumps({"inputs": [GOOD_PIXELS], "debug": True}).encode(), 422, "debug: Extra inputs are not permitted"),
    (json.dumps({"inputs": "0.5"}).encode(), 422, "inputs: Input should be a valid array"),
    (json.dumps({"inputs": ["seven"]}).encode(), 422, "inputs[0]: Input should be a valid array"),
    (json.dumps({"inputs": [[0.5] * 63]}).encode(), 422, "inputs[0]: List should have at least 64 items"),
    (json.dumps({"inputs": [GOOD_PIXELS, [0.5] * 65]}).encode(), 422, "inputs[1]: List should have at most 64"),
    (json.dumps({"inputs": [[0.5] * 5 + [[0.5]] + [0.5] * 58]}).encode(), 422, "inputs[0][5]: Input should be a valid number"),
    (json.dumps({"inputs": [[0.5] * 7 + ["1"] + [0.5] * 56]}).encode(), 422, "inputs[0][7]: Input should be a valid number"),
    (json.dumps({"inputs": [[0.5] * 63 + [True]]}).encode(), 422, "inputs[0][63]: Input should be a valid number"),
    (json.dumps({"inputs": [[0.5] * 10 + [float("nan")] + [0.5] * 53]}).encode(), 422, "inputs[0][10]: Input should be a finite number"),
    (json.dumps({"inputs": [[0.5] * 3 + [float("inf")] + [0.5] * 60]}).encode(), 422, "inputs[0][3]: Input should be a finite number"),
    (json.dumps({"inputs": [[float("-inf")] + [0.5] * 63]}).encode(), 422, "inputs[0][0]: Input should be a finite number"),
    (b'{"inputs": [[' + b"0.5, " * 63 + b"1e999]]}", 422, "inputs[0][63]: Input should be a finite number"),
    (json.dumps({"inputs": [[0.5] * 63 + [1e300]]}).encode(), 422, "inputs[0][63]: 1e+300 is outside the range"),
    (json.dumps({"inputs": []}).encode(), 422, "inputs: List should have at least 1 item"),
    (json.dumps({"inputs": [GOOD_PIXELS] * 9}).encode(), 422, "inputs: List should have at most 8 items"),
    (json.dumps({"inputs": [GOOD_PIXELS] * 8 + [[0.123456789] * 64] * 40}).encode(), 413, "body: "),
    # finite, in range, but the model's output overflows: a 4xx naming the item, never a broken answer
    (json.dumps({"inputs": [GOOD_PIXELS, [3e38] * 64]}).encode(), 422, "inputs[1]: the model's output for this item is not a finite number"),
]


def test_bad_requests_get_4xx_naming_the_field_while_good_ones_get_200(digits_server):
    bad = BAD_DIGIT_REQUESTS * 2
    good = [(json.dumps({"inputs": [GOOD_PIXELS] * (1 + i % 3)}).encode(), 200, None) for i in range(len(bad))]
    mixed = [request for pair in zip(good, bad) for request in pair]
    expected_row = None
    results = parallel(lambda request: digits_server.request("POST", "/predict", request[0]), mixed, workers=16)
    for (body, status, words), (got_status, headers, answer) in zip(mixed, results):
        assert got_status == status, (body[:80], answer)
        assert headers["content-type"] == "application/json"
        if status == 200:
            rows = [probabilities(p, DIGIT_LABELS) for p in answer["predictions"]]
            expected_row = rows[0] if expected_row is None else expected_row
            for row in rows:
                np.testing.assert_allclose(row, expected_row, atol=1e-6)
        else:
            assert words in answer["detail"], (words, answer["detail"])
            assert set(answer) == {"detail", "errors"}
    # still serving, and every request was counted
    assert digits_server.request("GET", "/healthz")[0] == 200
    metrics = digits_server.metrics()
    assert metric_value(metrics, 'torchwork_requests_total{status="422"}') >= 2 * (len(BAD_DIGIT_REQUESTS) - 1)
    assert metric_value(metrics, 'torchwork_requests_total{status="413"}') >= 2


def test_text_limits_and_wrong_methods(text_server):
    cases = [({"inputs": [""]}, 422, "inputs[0]: String should have at least 1 character"),
             ({"inputs": ["ok", "x" * 201]}, 422, "inputs[1]: String should have at most 200 characters"),
             ({"inputs": ["ok", 3]}, 422, "inputs[1]: Input should be a valid string"),
             ({"inputs": [["a list"]]}, 422, "inputs[0]: Input should be a valid string"),
             ({"inputs": ["ok"] * 9}, 422, "inputs: List should have at most 8 items")]
    for body, status, words in cases:
        got_status, _, answer = text_server.predict(body["inputs"])
        assert got_status == status and words in answer["detail"]
    status, _, answer = text_server.predict(["   ", "\u00e9t\u00e9 \U0001F600", "\x00"])  # no known word at all
    assert status == 200 and len(answer["predictions"]) == 3
    assert text_server.request("GET", "/predict")[0] == 405
    assert text_server.request("POST", "/nowhere", b"{}")[0] == 404
    status, _, answer = text_server.request("POST", "/predict", b'{"inputs": ["a"]}',
                                            headers={"Content-Length": "10000000"})
    assert status == 413 and "body: 10000000 bytes is more than" in answer["detail"]


# ---------------------------------------------------------------- health, readiness, metrics, docs
def test_health_readiness_metrics_and_openapi(digits_server):
    assert digits_server.request("GET", "/healthz")[:3:2] == (200, {"status": "alive"})
    assert digits_server.request("GET", "/readyz")[:3:2] == (200, {"status": "ready"})
    status, headers, text = digits_server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    for name in ("torchwork_requests_total", "torchwork_request_duration_seconds_bucket",
                 "torchwork_batch_size_bucket", "torchwork_queue_depth", "torchwork_requests_in_flight"):
        assert name in text
    status, _, html = digits_server.request("GET", "/docs")
    assert status == 200 and "swagger" in html.lower()
    schema = digits_server.request("GET", "/openapi.json")[2]
    body = schema["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    inputs = body["properties"]["inputs"]
    assert body["additionalProperties"] is False and body["required"] == ["inputs"]
    assert (inputs["minItems"], inputs["maxItems"]) == (1, 8)
    assert (inputs["items"]["minItems"], inputs["items"]["maxItems"]) == (64, 64)
    assert inputs["items"]["items"]["type"] == "number"
    assert "PredictResponse" in schema["components"]["schemas"]


# ---------------------------------------------------------------- load: batching, overflow, timeout, shutdown
def slow_item(seconds: float, x: float = 1.0) -> list[float]:
    """An input of the slow model: its batch sleeps ``seconds`` (the largest in the batch)."""
    return [seconds, x, 2.0, 3.0]


def known_to_be_slow(server) -> None:
    """Make the server estimate the slow model as slow, so that a lone slow request goes to its worker.

    The inline cost rule (``serve/batching.py``) runs a lone request it estimates cheap on the event loop
    itself, from the times of earlier lone requests: after this module's lone ``slow_item(0.0)`` requests it
    may estimate under 20 ms an item, run a 1 s request inline and leave ``/metrics`` unanswered until it is
    done (one random-order run, thread mode). One 0.1 s request makes the estimate at least 30 ms an item.
    """
    status, _, body = server.predict([slow_item(0.1)])
    assert status == 200, body


def wait_in_flight(server, count: int, results: list) -> None:
    deadline = time.monotonic() + 20
    while metric_value(server.metrics(), "torchwork_requests_in_flight") < count:
        assert time.monotonic() < deadline and not results, f"the requests never arrived: {results}"
        time.sleep(0.02)


def background(server, items: list, results: list) -> list[threading.Thread]:
    threads = [threading.Thread(target=lambda item=item: results.append((item, server.predict([item]))))
               for item in items]
    for thread in threads:
        thread.start()
    return threads


def test_queued_requests_are_batched_and_answered_correctly(slow_server):
    import torch

    known_to_be_slow(slow_server)
    before = metric_value(slow_server.metrics(), "torchwork_batch_size_count")
    results: list = []
    threads = background(slow_server, [slow_item(1.0)], results)  # the worker sleeps 1 s on this one...
    wait_in_flight(slow_server, 1, results)
    items = [slow_item(0.01, float(i)) for i in range(7)]
    threads += background(slow_server, items, results)  # ...while these 7 queue up behind it
    for thread in threads:
        thread.join(30)
    model = slow_model()
    for item, (status, _, body) in results:
        assert status == 200, body
        expected = model.linear(torch.tensor([item])).detach().numpy()[0]
        np.testing.assert_allclose(body["predictions"][0]["output"], expected, atol=1e-5)
    assert len(results) == 8
    # 1 + 7 items, at most 4 per batch: the queued ones ran together (3 batches), not one by one (8)
    assert metric_value(slow_server.metrics(), "torchwork_batch_size_count") - before <= 4


def test_a_full_queue_answers_503_with_retry_after(slow_server):
    known_to_be_slow(slow_server)
    results: list = []
    threads = background(slow_server, [slow_item(1.0)], results)  # occupies the worker for 1 s
    wait_in_flight(slow_server, 1, results)
    threads += background(slow_server, [slow_item(0.05) for _ in range(20)], results)  # 8 fit in the queue
    for thread in threads:
        thread.join(30)
    statuses = [status for _, (status, _, _) in results]
    assert sorted(set(statuses)) == [200, 503] and statuses.count(200) >= 9, statuses
    for _, (status, headers, body) in results:
        if status == 503:
            assert headers["retry-after"] == "1" and "the server is busy" in body["detail"]
            assert "--max-queue 8" in body["detail"]
    assert slow_server.predict([slow_item(0.0)])[0] == 200  # and it recovers


def test_a_request_past_the_timeout_answers_504_and_the_server_goes_on(slow_server):
    known_to_be_slow(slow_server)  # inline, the 4 s request would hold the event loop past its timeout
    status, _, body = slow_server.predict([slow_item(4.0)])
    assert status == 504 and "no prediction within 3 s" in body["detail"]
    assert slow_server.predict([slow_item(0.0)])[0] == 200


def test_sigterm_under_load_lets_in_flight_requests_finish(own_slow_server):
    # 8 requests of 0.5 s each, up to 4 per batch: at least three batches, 1.5 s of work running or queued.
    results: list = []
    threads = background(own_slow_server, [slow_item(0.5) for _ in range(8)], results)
    wait_in_flight(own_slow_server, 8, results)
    own_slow_server.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while True:  # it stops accepting connections
        try:
            socket.create_connection(("127.0.0.1", own_slow_server.port), timeout=2).close()
        except OSError:
            break
        assert time.monotonic() < deadline, "still accepting connections 10 s after SIGTERM"
        time.sleep(0.02)
    for thread in threads:
        thread.join(30)
    assert [status for _, (status, _, _) in results] == [200] * 8
    assert own_slow_server.process.wait(30) in (0, -signal.SIGTERM)
