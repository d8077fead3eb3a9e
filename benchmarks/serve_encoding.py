"""The serving hot path's hand-written parts against the libraries that do the same job, per answer.

- JSON: :func:`torchwork.serve.encoding.prediction_fragments` + :func:`~torchwork.serve.encoding.answer`
  (hand-written, bytes equal to ``json.dumps``) against ``orjson.dumps`` building the same answer (numpy
  rows serialized natively with ``OPT_SERIALIZE_NUMPY``), for a batch of 32 rows over 3 labels (the
  quickstart's text model), 10 labels (the CNNs) and raw outputs of 10 numbers (no labels), answered one
  item per request as in ``serve_load.py``;
- metrics: what one request and one batch record (``requests`` counter by status, latency histogram, batch
  size and duration histograms) with :mod:`torchwork.serve.metrics` against ``prometheus-client`` (its own
  registry), and one ``/metrics`` scrape.

Timed interleaved (rounds alternate the two sides, median of the rounds), microseconds per answer.
Run: ``python benchmarks/serve_encoding.py`` (about 20 s). Prints one JSON object.
"""

import json
import statistics
import time
from typing import Any

import numpy as np


def timed(calls: dict[str, Any], rounds: int = 15, number: int = 200) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    for index in range(rounds):
        names = list(calls) if index % 2 == 0 else list(reversed(calls))
        for name in names:
            started = time.perf_counter()
            for _ in range(number):
                calls[name]()
            samples[name].append((time.perf_counter() - started) / number * 1e6)
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def encoding(labels: list[str] | None, rows: np.ndarray) -> dict[str, Any]:
    import orjson

    from torchwork.serve.encoding import answer, prediction_fragments

    fragments = prediction_fragments(labels)
    option = orjson.OPT_SERIALIZE_NUMPY

    def hand() -> list[bytes]:  # the batch's fragments, then one answer per request (one item each)
        return [answer([fragment])[1] for fragment in fragments(rows)]

    if labels is None:
        def library() -> list[bytes]:
            return [orjson.dumps({"predictions": [{"output": row}]}, option=option) for row in rows]
    else:
        def library() -> list[bytes]:
            best = rows.argmax(axis=1).tolist()
            out = []
            for index, row in enumerate(rows.tolist()):
                out.append(orjson.dumps({"predictions": [{"label": labels[best[index]],
                                                          "probabilities": dict(zip(labels, row))}]}))
            return out

    same = [json.loads(a) for a in hand()] == [json.loads(b) for b in library()]
    per_batch = timed({"hand": hand, "orjson": library})
    return {"us_per_answer": {k: round(v / len(rows), 3) for k, v in per_batch.items()},
            "orjson_over_hand": round(per_batch["orjson"] / per_batch["hand"], 3), "same_json": same,
            "bytes_equal_json_dumps": {"hand": hand()[0] == json.dumps(json.loads(hand()[0])).encode(),
                                       "orjson": library()[0] == json.dumps(json.loads(library()[0])).encode()}}


def metrics() -> dict[str, Any]:
    import prometheus_client as prom

    from torchwork.serve.metrics import ServerMetrics

    ours = ServerMetrics(32, lambda: 0, lambda: 0)
    registry = prom.CollectorRegistry()
    requests = prom.Counter("torchwork_requests", "requests by status", ["status"], registry=registry)
    latency = prom.Histogram("torchwork_request_duration_seconds", "latency", registry=registry,
                             buckets=[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
    batch_size = prom.Histogram("torchwork_batch_size", "items", buckets=[1, 2, 4, 8, 16, 32], registry=registry)
    batch_seconds = prom.Histogram("torchwork_batch_duration_seconds", "batch time", registry=registry,
                                   buckets=[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5])

    def hand() -> None:
        ours.requests.inc("200")
        ours.latency.observe(0.0031)
        ours.batch_size.observe(21)
        ours.batch_seconds.observe(0.0012)

    def library() -> None:
        requests.labels("200").inc()
        latency.observe(0.0031)
        batch_size.observe(21)
        batch_seconds.observe(0.0012)

    per_request = timed({"hand": hand, "prometheus_client": library}, number=2000)
    scrape = timed({"hand": ours.render, "prometheus_client": lambda: prom.generate_latest(registry)}, number=200)
    return {"us_per_request": per_request, "us_per_scrape": scrape,
            "library_over_hand_per_request": round(per_request["prometheus_client"] / per_request["hand"], 3)}


def main() -> None:
    import orjson
    import prometheus_client

    rng = np.random.default_rng(0)

    def probabilities(width: int) -> np.ndarray:
        logits = rng.normal(size=(32, width))
        return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)

    started = time.perf_counter()
    report = {"benchmark": "serve_encoding", "versions": {"orjson": orjson.__version__,
                                                          "prometheus_client": getattr(prometheus_client, "__version__", "0.26.0")},
              "encoding": {"text_3_labels": encoding(["negative", "neutral", "positive"], probabilities(3)),
                           "cnn_10_labels": encoding([str(i) for i in range(10)], probabilities(10)),
                           "raw_10_outputs": encoding(None, rng.normal(size=(32, 10)).astype(np.float32))},
              "metrics": metrics()}
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
