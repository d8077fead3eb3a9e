"""Two runs' metric curves aligned by step, and the first step where they part.

Example:
    >>> a = [{"step": 1, "val_loss": 0.9}, {"step": 2, "val_loss": 0.7}, {"step": 3, "val_loss": 0.6}]
    >>> b = [{"step": 1, "val_loss": 0.9}, {"step": 2, "val_loss": 0.8}]
    >>> curves = compare_curves(a, b, "val_loss")
    >>> curves["divergence"]["step"], curves["metrics"]["val_loss"]["rows"][-1]
    (2, [3, 0.6, None])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchwork.runs.readback import number

ALSO = ("train_loss", "val_loss", "loss")  # compared besides the monitored metric, when logged
RELATIVE_TOLERANCE = 1e-6  # the same computation on the same machine agrees to the last bits; this is far above
TABLE_ROWS = 12


def series(lines: Sequence[dict[str, Any]], metric: str) -> dict[int, float]:
    """``{step: value}`` of ``metric`` (the last value logged at a step wins)."""
    found: dict[int, float] = {}
    for line in lines:
        value = number(line.get(metric))
        if value is not None:
            found[int(line["step"])] = value
    return found


def _apart(x: float, y: float) -> bool:
    return abs(x - y) > RELATIVE_TOLERANCE * max(1.0, abs(x), abs(y))


def compare_curves(lines_a: Sequence[dict[str, Any]], lines_b: Sequence[dict[str, Any]],
                   monitor: str | None) -> dict[str, Any]:
    """Per metric the rows ``[step, A, B]`` over the union of steps, and the divergence: the first step
    both runs logged where some metric differs (or where one run stopped while the other went on)."""
    names = [m for m in dict.fromkeys([*( [monitor] if monitor else []), *ALSO])]
    metrics: dict[str, Any] = {}
    divergence: dict[str, Any] | None = None
    for name in names:
        sa, sb = series(lines_a, name), series(lines_b, name)
        if not sa and not sb:
            continue
        steps = sorted(set(sa) | set(sb))
        metrics[name] = {"rows": [[s, sa.get(s), sb.get(s)] for s in steps], "last_a": max(sa, default=None),
                         "last_b": max(sb, default=None)}
        for step in steps:
            if step in sa and step in sb and _apart(sa[step], sb[step]):
                if divergence is None or step < divergence["step"]:
                    divergence = {"step": step, "metric": name, "a": sa[step], "b": sb[step]}
                break
    if divergence is None and metrics:
        ends = {(m["last_a"], m["last_b"]) for m in metrics.values()}
        last_a, last_b = max(e[0] or 0 for e in ends), max(e[1] or 0 for e in ends)
        if last_a != last_b:
            divergence = {"step": min(last_a, last_b), "metric": None, "a": None, "b": None,
                          "note": f"identical until step {min(last_a, last_b)}, where "
                                  f"{'A' if last_a < last_b else 'B'} stopped"}
    return {"monitor": monitor, "metrics": metrics, "divergence": divergence}


def _pick(rows: list[list[Any]], keep: set[int]) -> list[list[Any]]:
    if len(rows) <= TABLE_ROWS:
        return rows
    every = max(1, len(rows) // (TABLE_ROWS - 2))
    chosen = {i for i in range(0, len(rows), every)} | {len(rows) - 1}
    chosen |= {i for i, r in enumerate(rows) if r[0] in keep}
    return [rows[i] for i in sorted(chosen)]


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_curves(curves: dict[str, Any]) -> str:
    """The monitored metric (else the first one logged) as a short table, and the divergence step."""
    metrics = curves["metrics"]
    if not metrics:
        return "curves: neither run logged metrics (metrics.jsonl is missing or empty)"
    name = curves["monitor"] if curves["monitor"] in metrics else next(iter(metrics))
    divergence = curves["divergence"]
    keep = {divergence["step"]} if divergence else set()
    lines = [f"curves: {name} by step", f"  {'step':>6}  {'A':>9}  {'B':>9}  {'B - A':>9}"]
    for step, a, b in _pick(metrics[name]["rows"], keep):
        delta = "" if a is None or b is None else f"{b - a:+.4f}"
        mark = "  <- diverge" if divergence and step == divergence["step"] else ""
        lines.append(f"  {step:>6}  {_cell(a):>9}  {_cell(b):>9}  {delta:>9}{mark}")
    if divergence is None:
        lines.append("  the curves are identical at every step both runs logged")
    elif divergence.get("metric"):
        lines.append(f"  they diverge at step {divergence['step']} ({divergence['metric']}: "
                     f"{divergence['a']:.6g} vs {divergence['b']:.6g})")
    else:
        lines.append(f"  {divergence['note']}")
    return "\n".join(lines)
