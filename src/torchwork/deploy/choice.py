"""The variant to deploy: the most exact one, unless another is measurably faster and checked on enough data.

A variant other than the most exact one is recommended only when

1. it passed parity (or, quantized, stayed within the accuracy tolerance) on at least
   :data:`MIN_PARITY_ROWS` real inputs: four example inputs say nothing about a quantized model's error;
2. its median batch time, over at least :data:`MIN_TIMING_ROUNDS` interleaved rounds, beats the most exact
   variant's by more than the spread of both (the sum of their interquartile ranges): a difference inside
   the noise would flip between two runs.

Otherwise the most exact variant is kept, and each variant's ``choice`` says why.

Example:
    >>> rows = {"pt2": {"kind": "exact", "ok": True, "max_abs": 0.0},
    ...         "onnx-int8": {"kind": "quantized", "ok": True, "max_abs": 0.03}}
    >>> timings = {"pt2": [1.0, 1.1, 0.9, 1.0, 1.05], "onnx-int8": [0.5, 0.52, 0.49, 0.5, 0.51]}
    >>> choose_variant(rows, timings, inputs=4)[0]       # four inputs: too few to trust INT8
    'pt2'
    >>> choose_variant(rows, timings, inputs=360)[0]     # 2x faster, far beyond the spread
    'onnx-int8'
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

MIN_PARITY_ROWS = 200
MIN_TIMING_ROUNDS = 5


def spread(samples: Sequence[float]) -> float:
    """Interquartile range of timing samples (0 for fewer than two)."""
    if len(samples) < 2:
        return 0.0
    quartiles = statistics.quantiles(samples, n=4, method="inclusive")
    return quartiles[2] - quartiles[0]


def most_exact(rows: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The passing variant closest to the reference: the reference itself (the CLI's pt2), then exact kinds,
    then the smallest max abs error."""
    passing = [n for n, r in rows.items() if r.get("ok") and r.get("within_tolerance", True)]
    order, rank = list(rows), {"reference": 0, "exact": 1}
    return min(passing, default=None, key=lambda n: (rank.get(rows[n].get("kind"), 2), rows[n].get("max_abs") or 0.0,
                                                     rows[n].get("max_rel") or 0.0, order.index(n)))


def choose_variant(rows: Mapping[str, Mapping[str, Any]], timings: Mapping[str, Sequence[float]],
                   inputs: int) -> tuple[str | None, dict[str, str]]:
    """The variant to deploy and, for every variant, why it was or was not chosen.

    ``rows``: the artifact's variants (``kind``, ``ok``, ``within_tolerance``, ``max_abs``, ``problem``);
    ``timings``: seconds per batch of each variant, one sample per interleaved round; ``inputs``: how many
    real inputs parity was checked on.
    """
    reasons: dict[str, str] = {}
    for name, row in rows.items():
        if not (row.get("ok") and row.get("within_tolerance", True)):
            reasons[name] = f"not chosen: fails parity ({row.get('problem') or 'outside the tolerance'})"
    exact = most_exact(rows)
    if exact is None:
        return None, reasons
    base = timings.get(exact) or []
    base_median = statistics.median(base) if base else None
    faster: dict[str, float] = {}
    for name in rows:
        if name in reasons or name == exact:
            continue
        samples = timings.get(name) or []
        if inputs < MIN_PARITY_ROWS:
            reasons[name] = (f"not chosen: parity was checked on {inputs} inputs; a variant other than the most "
                             f"exact needs >= {MIN_PARITY_ROWS} real held-out inputs")
        elif min(len(samples), len(base)) < MIN_TIMING_ROUNDS:
            reasons[name] = (f"not chosen: {min(len(samples), len(base))} timing rounds; >= {MIN_TIMING_ROUNDS} "
                             "are needed to measure the spread")
        else:
            median, noise = statistics.median(samples), spread(samples) + spread(base)
            speedup = base_median / median
            if base_median - median > noise:
                faster[name] = median
                reasons[name] = (f"{speedup:.2f}x the speed of {exact}, beyond the timing spread "
                                 f"(gain {1e3 * (base_median - median):.3f} ms > IQR sum {1e3 * noise:.3f} ms)")
            else:
                reasons[name] = (f"not chosen: {speedup:.2f}x the speed of {exact}, within the timing spread "
                                 f"(gain {1e3 * (base_median - median):.3f} ms <= IQR sum {1e3 * noise:.3f} ms)")
    if not faster:
        reasons[exact] = "chosen: the most exact variant that passes parity (no other is measurably faster)"
        return exact, reasons
    chosen = min(faster, key=faster.__getitem__)
    reasons[chosen] = "chosen: " + reasons[chosen]
    for name in faster:
        if name != chosen:
            reasons[name] = f"not chosen: {chosen} is faster; " + reasons[name]
    reasons[exact] = f"not chosen: the most exact variant, but {chosen} is measurably faster"
    return chosen, reasons
