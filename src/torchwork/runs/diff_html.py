"""``runs diff --html FILE``: the comparison as one self-contained page, the curves drawn as inline SVG
(no script, no external file, every value escaped).

Example:
    >>> svg = curve_svg("val_loss", [[1, 0.9, 0.9], [2, 0.7, 0.8]], 2)
    >>> svg.startswith("<svg") and svg.count("<polyline") == 2
    True
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from torchwork.files import atomic_write

WIDTH, HEIGHT, PAD = 640, 260, 44
COLOURS = {"A": "#1f77b4", "B": "#ff7f0e"}


def curve_svg(name: str, rows: list[list[Any]], divergence: int | None) -> str:
    """Both runs' ``[step, A, B]`` rows as two polylines, the divergence step as a dashed line."""
    points = [(s, v) for s, a, b in rows for v in (a, b) if v is not None]
    if not points:
        return ""
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1e-9)

    def x(step: float) -> float:
        return PAD + (step - x0) / (x1 - x0) * (WIDTH - 2 * PAD)

    def y(value: float) -> float:
        return HEIGHT - PAD - (value - y0) / (y1 - y0) * (HEIGHT - 2 * PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'aria-label="{html.escape(name)}">',
             f'<rect x="{PAD}" y="{PAD}" width="{WIDTH - 2 * PAD}" height="{HEIGHT - 2 * PAD}" fill="none" '
             'stroke="#ccc"/>',
             f'<text x="{PAD}" y="{PAD - 12}" font-size="13">{html.escape(name)} by step</text>',
             f'<text x="4" y="{PAD + 4}" font-size="11">{y1:.4g}</text>',
             f'<text x="4" y="{HEIGHT - PAD}" font-size="11">{y0:.4g}</text>',
             f'<text x="{PAD}" y="{HEIGHT - PAD + 16}" font-size="11">step {x0}</text>',
             f'<text x="{WIDTH - PAD - 60}" y="{HEIGHT - PAD + 16}" font-size="11">step {x1}</text>']
    for index, side in enumerate("AB"):
        line = " ".join(f"{x(r[0]):.1f},{y(r[1 + index]):.1f}" for r in rows if r[1 + index] is not None)
        parts.append(f'<polyline fill="none" stroke="{COLOURS[side]}" stroke-width="2" points="{line}"/>')
        parts.append(f'<text x="{WIDTH - PAD - 60 + 30 * index}" y="{PAD - 12}" font-size="12" '
                     f'fill="{COLOURS[side]}">{side}</text>')
    if divergence is not None and x0 <= divergence <= x1:
        parts.append(f'<line x1="{x(divergence):.1f}" x2="{x(divergence):.1f}" y1="{PAD}" y2="{HEIGHT - PAD}" '
                     'stroke="#d62728" stroke-dasharray="4 3"/>')
    parts.append("</svg>")
    return "".join(parts)


def _cell(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else json.dumps(value, default=str))


def render(comparison: dict[str, Any]) -> str:
    a, b, verdict = comparison["a"], comparison["b"], comparison["verdict"]
    divergence = (comparison["curves"].get("divergence") or {}).get("step")
    rows = "".join(f"<tr><td>{_cell(d['group'])}</td><td>{_cell(d['key'])}</td><td>{_cell(d['a'])}</td>"
                   f"<td>{_cell(d['b'])}</td><td>{_cell(d['note'])}</td></tr>" for d in comparison["differences"])
    causes = "".join(f"<li>{_cell(c['what'])}</li>" for c in verdict["causes"])
    plots = "".join(curve_svg(name, m["rows"], divergence) for name, m in comparison["curves"]["metrics"].items())
    return ("<!doctype html><html><head><meta charset='utf-8'><title>runs diff</title><style>"
            "body{font-family:sans-serif;margin:2em;max-width:70em}td,th{border-bottom:1px solid #ddd;"
            "padding:4px 8px;text-align:left;vertical-align:top}table{border-collapse:collapse}</style></head><body>"
            f"<h1>runs diff</h1><p>A: {_cell(a['path'])}<br>B: {_cell(b['path'])}</p>"
            f"<h2>Verdict</h2><p>{_cell(verdict['conclusion'])}</p><ol>{causes}</ol>"
            f"<h2>Differences</h2><table><tr><th>group</th><th>what</th><th>A</th><th>B</th><th>note</th></tr>"
            f"{rows}</table><h2>Curves</h2>{plots or '<p>no metrics logged</p>'}</body></html>")


def write_html(path: str | os.PathLike[str], comparison: dict[str, Any]) -> None:
    """Write the page atomically (no half-written file is left on error)."""
    with atomic_write(path, "w") as handle:
        handle.write(render(comparison))
