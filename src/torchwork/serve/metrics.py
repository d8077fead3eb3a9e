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

    def head(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]

    def samples(self, labels: str = "") -> list[str]:
        """The sample lines, each with ``labels`` (``'model="a"'``) before its own label."""
        if self.label is None:
            return [f"{self.name}{{{labels}}} {self.values['']}" if labels else f"{self.name} {self.values['']}"]
        joined = f"{labels}," if labels else ""
        return [f'{self.name}{{{joined}{self.label}="{key}"}} {count}' for key, count in sorted(self.values.items())]

    def render(self) -> str:
        return "\n".join(self.head() + self.samples())


class Gauge:
    """A gauge read from a function at scrape time."""

    def __init__(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.name, self.help, self.read = name, help_text, read

    def head(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge"]

    def samples(self, labels: str = "") -> list[str]:
        return [f"{self.name}{{{labels}}} {_number(self.read())}" if labels else f"{self.name} {_number(self.read())}"]

    def render(self) -> str:
        return "\n".join(self.head() + self.samples())


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

    def head(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]

    def samples(self, labels: str = "") -> list[str]:
        lines, running = [], 0
        joined, alone = (f"{labels},", f"{{{labels}}}") if labels else ("", "")
        for bound, count in zip([*map(_number, self.bounds), "+Inf"], self.counts):
            running += count
            lines.append(f'{self.name}_bucket{{{joined}le="{bound}"}} {running}')
        return [*lines, f"{self.name}_sum{alone} {_number(self.sum)}", f"{self.name}_count{alone} {self.count}"]

    def render(self) -> str:
        return "\n".join(self.head() + self.samples())


class ServerMetrics:
    """The metrics ``/metrics`` shows: requests by status, latency, batch sizes, queue depth; and
    ``extra``'s (e.g. the connection guard's), anything with a ``render()``."""

    def __init__(self, max_batch_size: int, queue_depth: Callable[[], float],
                 in_flight: Callable[[], float], extra: Sequence[Any] = ()) -> None:
        self.requests = Counter("torchwork_requests_total", "HTTP requests to /predict and /v2/.../infer by status "
                                "code", "status")
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

    def parts(self) -> list[Any]:
        """The per-model metrics, in the order they are shown."""
        return [self.requests, self.client_disconnects, self.latency, self.batch_size, self.batch_seconds,
                self.queue_depth, self.in_flight]

    def render(self) -> str:
        return "\n".join(part.render() for part in [*self.parts(), *self.extra]) + "\n"


def render_models(models: Sequence[tuple[str, ServerMetrics]], extra: Sequence[Any] = ()) -> str:
    """The metrics of several models, each sample labelled ``model="NAME"`` and each metric's HELP and TYPE
    once (the exposition format groups a metric's samples), then ``extra``'s (the server's own).

    Example:
        >>> a, b = (ServerMetrics(2, lambda: 0, lambda: 0) for _ in range(2))
        >>> a.requests.inc("200")
        >>> [line for line in render_models([("a", a), ("b", b)]).splitlines() if "requests_total{" in line]
        ['torchwork_requests_total{model="a",status="200"} 1']
    """
    lines: list[str] = []
    for index, part in enumerate(models[0][1].parts() if models else []):
        lines += part.head()
        for name, metrics in models:
            lines += metrics.parts()[index].samples(f'model="{name}"')
    return "\n".join([*lines, *(part.render() for part in extra)]) + "\n"
