"""Prometheus text exposition, written by hand: counters, gauges and histograms, no dependency.

Each metric has a single writer thread (the event loop for requests, the batch worker for batches), so plain
integer updates are safe under the GIL; a scrape may read a histogram mid-update, which Prometheus tolerates.

Example:
    >>> from torchwork.serve.metrics import Histogram
    >>> h = Histogram("batch_size", "items per batch", [1, 2, 4])
    >>> h.observe(2); h.observe(3)
    >>> print(h.render())  # doctest: +NORMALIZE_WHITESPACE
    # HELP batch_size items per batch
    # TYPE batch_size histogram
    batch_size_bucket{le="1"} 0
    batch_size_bucket{le="2"} 1
    batch_size_bucket{le="4"} 2
    batch_size_bucket{le="+Inf"} 2
    batch_size_sum 5
    batch_size_count 2
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Counter:
    """A counter with one label (e.g. status code), ``inc(label)``; or with none, ``inc()``."""

    def __init__(self, name: str, help_text: str, label: str | None = None) -> None:
        self.name, self.help, self.label = name, help_text, label
        self.values: dict[str, int] = {} if label else {"": 0}

    def inc(self, value: str = "", amount: int = 1) -> None:
        self.values[value] = self.values.get(value, 0) + amount

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        if self.label is None:
            return "\n".join([*lines, f"{self.name} {self.values['']}"])
        lines += [f'{self.name}{{{self.label}="{key}"}} {count}' for key, count in sorted(self.values.items())]
        return "\n".join(lines)


class Gauge:
    """A gauge read from a function at scrape time."""

    def __init__(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.name, self.help, self.read = name, help_text, read

    def render(self) -> str:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} gauge\n{self.name} {_number(self.read())}"


class Histogram:
    """A histogram with fixed upper bounds (``le``), cumulative when rendered."""

    def __init__(self, name: str, help_text: str, buckets: Sequence[float]) -> None:
        self.name, self.help = name, help_text
        self.bounds = sorted(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, count in zip([*map(_number, self.bounds), "+Inf"], self.counts):
            running += count
            lines.append(f'{self.name}_bucket{{le="{bound}"}} {running}')
        lines += [f"{self.name}_sum {_number(self.sum)}", f"{self.name}_count {self.count}"]
        return "\n".join(lines)


class ServerMetrics:
    """The metrics ``/metrics`` shows: requests by status, latency, batch sizes, queue depth; and
    ``extra``'s (e.g. the connection guard's), anything with a ``render()``."""

    def __init__(self, max_batch_size: int, queue_depth: Callable[[], float],
                 in_flight: Callable[[], float], extra: Sequence[Any] = ()) -> None:
        self.requests = Counter("torchwork_requests_total", "HTTP requests to /predict by status code", "status")
        self.client_disconnects = Counter("torchwork_client_disconnects_total", "requests to /predict whose "
                                          "client disconnected before sending its whole body (not answered)")
        self.extra = list(extra)
        self.latency = Histogram("torchwork_request_duration_seconds", "time to answer POST /predict",
                                 [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
        sizes, size = [], 1
        while size < max_batch_size:
            sizes.append(size)
            size *= 2
        self.batch_size = Histogram("torchwork_batch_size", "items per model call", [*sizes, max_batch_size])
        self.batch_seconds = Histogram("torchwork_batch_duration_seconds", "time of one model call, "
                                       "preprocessing included", [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                  0.05, 0.1, 0.25, 0.5, 1, 2.5])
        self.queue_depth = Gauge("torchwork_queue_depth", "items waiting for the model", queue_depth)
        self.in_flight = Gauge("torchwork_requests_in_flight", "requests to /predict being answered", in_flight)

    def render(self) -> str:
        parts = [self.requests, self.client_disconnects, self.latency, self.batch_size, self.batch_seconds,
                 self.queue_depth, self.in_flight, *self.extra]
        return "\n".join(part.render() for part in parts) + "\n"
