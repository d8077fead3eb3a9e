"""serve/metrics.py: the server's counters and histograms, as Prometheus text."""

from __future__ import annotations

from torchwork.serve.metrics import ServerMetrics


def test_metrics_render_prometheus_text():
    metrics = ServerMetrics(16, lambda: 3, lambda: 1)
    metrics.requests.inc("200")
    metrics.requests.inc("422", 2)
    metrics.batch_size.observe(5)
    metrics.latency.observe(0.002)
    text = metrics.render()
    assert 'torchwork_requests_total{status="422"} 2' in text
    assert 'torchwork_batch_size_bucket{le="4"} 0' in text and 'torchwork_batch_size_bucket{le="8"} 1' in text
    assert 'torchwork_batch_size_bucket{le="16"} 1' in text and "torchwork_queue_depth 3" in text
    assert 'torchwork_request_duration_seconds_bucket{le="0.0025"} 1' in text
    assert text.endswith("\n")
