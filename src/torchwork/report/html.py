"""A single-file HTML report: text, tables and plots embedded as data: URIs (opens offline).

Example:
    >>> import tempfile, pathlib
    >>> from torchwork.report.html import Report
    >>> report = Report("Run")
    >>> report.table("Scores", ["metric", "value"], [["accuracy", 0.91]])
    >>> path = report.write(pathlib.Path(tempfile.mkdtemp()) / "report.html")
    >>> "<td>0.91</td>" in path.read_text()
    True
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.files import atomic_write

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;margin:2em auto;
padding:0 1em;color:#1d2330;line-height:1.45}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #dde;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccd;padding:.3em .7em;text-align:right}
th{background:#f2f4f8}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee}pre{background:#f6f8fa;padding:1em;overflow:auto;font-size:.85em}
.note{color:#555}.good{color:#107010;font-weight:600}.bad{color:#a01010;font-weight:600}
"""


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return html.escape(str(value))


class Report:
    """Collects sections in order; :meth:`write` renders them into one HTML file."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.parts: list[str] = []

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def paragraph(self, text: str, css: str = "") -> None:
        self.parts.append(f'<p class="{css}">{html.escape(text)}</p>' if css else f"<p>{html.escape(text)}</p>")

    def table(self, title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
        caption = f"<h3>{html.escape(title)}</h3>" if title else ""
        self.parts.append(f"{caption}<table><tr>{head}</tr>{body}</table>")

    def image(self, png: bytes, alt: str) -> None:
        data = base64.b64encode(png).decode("ascii")
        self.parts.append(f'<p><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></p>')

    def code(self, obj: Any) -> None:
        text = obj if isinstance(obj, str) else json.dumps(obj, indent=2, default=str)
        self.parts.append(f"<pre>{html.escape(text)}</pre>")

    def render(self) -> str:
        body = "\n".join(self.parts)
        return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                f'<meta name="viewport" content="width=device-width,initial-scale=1">'
                f"<title>{html.escape(self.title)}</title><style>{_STYLE}</style></head>"
                f"<body><h1>{html.escape(self.title)}</h1>\n{body}\n</body></html>\n")

    def write(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        with atomic_write(path, "w") as handle:
            handle.write(self.render())
        return path
