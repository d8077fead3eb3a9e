"""The variant to deploy: the most exact one, unless another is measurably faster and checked on enough data.

A variant other than the most exact one is recommended only when

1. it passed parity (or, quantized, stayed within the accuracy tolerance) on at least
   :data:`MIN_PARITY_ROWS` real inputs: four example inputs say nothing about a quantized model's error;
2. its median batch time, over at least :data:`MIN_TIMING_ROUNDS` interleaved rounds, beats the best
   variant so far (candidates taken from the most exact on) by more than the spread of both (the sum of
   their interquartile ranges): a difference inside the noise would flip between two runs;
3. where batch-1 latencies were timed too, it wins at one batch size beyond the spread and is not slower
   beyond the spread at the other: a server answers single requests as well as full batches, so a variant
   3.7x slower than another at batch 1 is not chosen for being level at batch 64.

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


def _compare(name: str, best: str, timings: Mapping[str, Sequence[float]], label: str) -> tuple[float, str]:
    """``(gain, words)``: how much faster ``name`` is than ``best`` beyond both spreads (< 0: slower beyond
    them; 0: within them), and the words for it."""
    samples, base = timings.get(name) or [], timings.get(best) or []
    base_median, median = statistics.median(base), statistics.median(samples)
    noise = spread(samples) + spread(base)
    gain = base_median - median
    beyond = gain - noise if gain > noise else (gain + noise if gain < -noise else 0.0)
    relation = "beyond" if beyond else "within"
    return beyond, (f"{base_median / median:.2f}x the speed of {best}{label}, {relation} the timing spread "
                    f"(gain {1e3 * gain:.3f} ms {'>' if beyond else '<='} IQR sum {1e3 * noise:.3f} ms)")


def choose_variant(rows: Mapping[str, Mapping[str, Any]], timings: Mapping[str, Sequence[float]],
                   inputs: int, latencies: Mapping[str, Sequence[float]] | None = None
                   ) -> tuple[str | None, dict[str, str]]:
    """The variant to deploy and, for every variant, why it was or was not chosen.

    ``rows``: the artifact's variants (``kind``, ``ok``, ``within_tolerance``, ``max_abs``, ``problem``);
    ``timings``: seconds per batch of each variant, one sample per interleaved round; ``inputs``: how many
    real inputs parity was checked on; ``latencies``: seconds per batch-1 call, per round, where timed.
    """
    reasons: dict[str, str] = {}
    for name, row in rows.items():
        if not (row.get("ok") and row.get("within_tolerance", True)):
            reasons[name] = f"not chosen: fails parity ({row.get('problem') or 'outside the tolerance'})"
    exact = most_exact(rows)
    if exact is None:
        return None, reasons
    # Candidates from the most exact on; each must beat the best so far by more than both spreads, so that
    # a variant barely faster than another fast one (INT8 2% ahead of ONNX inside a 36% spread) never wins.
    order, rank = list(rows), {"reference": 0, "exact": 1}
    candidates = sorted((n for n in rows if n not in reasons and n != exact),
                        key=lambda n: (rank.get(rows[n].get("kind"), 2), rows[n].get("max_abs") or 0.0, order.index(n)))
    best = exact
    replaced: list[str] = []
    for name in candidates:
        samples, base = timings.get(name) or [], timings.get(best) or []
        if inputs < MIN_PARITY_ROWS:
            reasons[name] = (f"not chosen: parity was checked on {inputs} inputs; a variant other than the most "
                             f"exact needs >= {MIN_PARITY_ROWS} real held-out inputs")
            continue
        if min(len(samples), len(base)) < MIN_TIMING_ROUNDS:
            reasons[name] = (f"not chosen: {min(len(samples), len(base))} timing rounds; >= {MIN_TIMING_ROUNDS} "
                             "are needed to measure the spread")
            continue
        gains = [_compare(name, best, timings, "")]
        if latencies and min(len(latencies.get(name) or []), len(latencies.get(best) or [])) >= MIN_TIMING_ROUNDS:
            gains.append(_compare(name, best, latencies, " at batch 1"))
        words = "; ".join(w for _, w in gains)
        if any(g > 0 for g, _ in gains) and not any(g < 0 for g, _ in gains):
            reasons[name] = words
            replaced.append(best)
            best = name
        else:
            reasons[name] = f"not chosen: {words}"
    if best == exact:
        reasons[exact] = "chosen: the most exact variant that passes parity (no other is measurably faster)"
        return exact, reasons
    reasons[best] = "chosen: " + reasons[best]
    for name in replaced:
        if name != exact:
            reasons[name] = f"not chosen: {best} is measurably faster; " + reasons[name]
    reasons[exact] = f"not chosen: the most exact variant, but {best} is measurably faster"
    return best, reasons
