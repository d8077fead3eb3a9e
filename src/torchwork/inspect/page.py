"""The HTML page of a graph: one self-contained file (inline CSS, SVG and a few lines of script; no network).

Order of the page: the parameters that get no gradient, what backward keeps alive by module, a module
overview, the node graph, then one collapsible section per module. Graphs above
:data:`~torchwork.inspect.render.OPEN_LIMIT` nodes start collapsed.

Example:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> from torchwork.inspect import trace
    >>> page = Path(tempfile.mkdtemp()) / "graph.html"
    >>> _ = trace(torch.nn.Linear(3, 2), torch.ones(4, 3)).to_html(page)
    >>> "AddmmBackward0" in page.read_text()
    True
"""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING

from torchwork.inspect.render import (
    OPEN_LIMIT,
    block_totals,
    human_bytes,
    module_boxes,
    module_label,
    node_boxes,
    render_svg,
)
from torchwork.locations import format_where

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.inspect.graphs import Graph

_STYLE = """
body{font-family:Helvetica,Arial,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.2em .7em;text-align:left;border-bottom:1px solid #ddd}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{background:#fde8e8;border-left:4px solid #d33;padding:.5em 1em}
.ok{background:#e8f6e8;border-left:4px solid #3a3;padding:.5em 1em}
.bar{display:inline-block;height:.8em;background:#80b1d3}
.swatch{display:inline-block;width:.9em;height:.9em;border:1px solid #777;vertical-align:middle;margin-right:.4em}
details{margin:.3em 0}summary{cursor:pointer}
.svg{overflow:auto;border:1px solid #ddd;max-height:80vh}
code{background:#f3f3f3;padding:0 .2em}
"""
_SCRIPT = """
function setAll(open){document.querySelectorAll('details.module').forEach(function(d){d.open=open;});}
function openTarget(){var id=window.location.hash.slice(1);var el=id?document.getElementById(id):null;
if(el&&el.tagName==='DETAILS'){el.open=true;}}
window.addEventListener('hashchange',openTarget);openTarget();
"""


def write_html(g: Graph, path: str | os.PathLike[str], use_dot: bool | None = None) -> str:
    """Write ``g`` as one page to ``path`` (atomically); ``use_dot=False`` forces the built-in layout."""
    from torchwork.files import atomic_write

    text = page_html(g, use_dot=use_dot)
    with atomic_write(path, "w") as handle:
        handle.write(text)
    return str(path)


def page_html(g: Graph, use_dot: bool | None = None) -> str:
    colours = {module_label(b.group): b.colour for b in module_boxes(g)[0]}
    large = len(g.nodes) > OPEN_LIMIT
    overview_svg, layout = render_svg(*module_boxes(g), clusters=False, use_dot=use_dot)
    graph_svg, _ = render_svg(*node_boxes(g), clusters=True, use_dot=use_dot)
    e = html.escape
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>autograd graph</title>",
             f"<style>{_STYLE}</style></head><body>",
             "<h1>Autograd graph</h1>",
             f"<p>{len(g.nodes)} nodes, {len(g.leaves)} leaves, output shape <code>{e(str(tuple(g.output_shape)))}"
             f"</code>; backward keeps <b>{human_bytes(g.saved_bytes)}</b> of activations alive "
             f"({sum(1 for s in g.saved if s.parameter is None)} tensors). Layout: {layout}.</p>"]
    parts += _unreached_section(g)
    parts += _stale_section(g)
    parts += _memory_section(g, colours)
    parts += ["<h2>Modules</h2><p>Data flows downwards; click a module to open its section below.</p>",
              f"<div class='svg'>{overview_svg}</div>",
              f"<h2>Nodes</h2><details class='graph'{'' if large else ' open'}><summary>the whole graph "
              f"({len(g.nodes)} nodes, coloured by module)</summary><div class='svg'>{graph_svg}</div></details>",
              "<h2>By module</h2><p><button onclick='setAll(true)'>expand all</button> "
              "<button onclick='setAll(false)'>collapse all</button></p>"]
    parts += _module_sections(g, colours, large)
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "".join(parts)


def _unreached_section(g: Graph) -> list[str]:
    if not g.unreached:
        return ["<div class='ok'>Every parameter of the model is reached: each will get a gradient.</div>"]
    rows = "".join(f"<tr><td><code>{html.escape(name)}</code></td><td>{html.escape(reason.kind)}</td>"
                   f"<td>{html.escape(str(reason))}</td></tr>" for name, reason in g.unreached.items())
    return [f"<div class='bad'><h2>{len(g.unreached)} parameter(s) will get no gradient from this output</h2>",
            f"<table><tr><th>parameter</th><th>kind</th><th>why</th></tr>{rows}</table></div>"]


def _stale_section(g: Graph) -> list[str]:
    stale = [s for s in g.saved if s.stale]
    if not stale:
        return []
    rows = "".join(f"<tr><td>{html.escape(s.attribute)} {html.escape(str(s.shape))}</td>"
                   f"<td>{html.escape(format_where(s.modified_at, 'unknown'))}</td>"
                   f"<td>{html.escape(s.stale or '')}</td></tr>" for s in stale)
    return ["<div class='bad'><h2>Saved tensors modified in place (backward will fail)</h2>",
            f"<table><tr><th>saved</th><th>modified at</th><th>PyTorch says</th></tr>{rows}</table></div>"]


def _memory_section(g: Graph, colours: dict[str, str]) -> list[str]:
    by_module = sorted(g.saved_by_module().items(), key=lambda kv: -kv[1])
    if not by_module:
        return ["<h2>Saved for backward</h2><p>Nothing.</p>"]
    top = by_module[0][1] or 1
    counts: dict[str, int] = {}
    for item in g.saved:
        if item.parameter is None:
            counts[item.module or ""] = counts.get(item.module or "", 0) + 1
    rows = "".join(
        f"<tr><td><span class='swatch' style='background:{colours.get(module_label(m), '#fff')}'></span>"
        f"{html.escape(module_label(m))}</td><td class='num'>{human_bytes(b)}</td><td class='num'>{counts[m]}</td>"
        f"<td><span class='bar' style='width:{max(1, round(200 * b / top))}px'></span></td></tr>"
        for m, b in by_module)
    parts = [f"<h2>Saved for backward: {human_bytes(g.saved_bytes)}</h2>",
             "<p>Activations kept alive until backward runs, by the module that was running when they were "
             "saved (storage shared by several nodes counted once; parameters' own storage not counted). "
             "They grow with the batch size; checkpointing a block frees its share until backward.</p>"]
    blocks = block_totals(dict(by_module))
    if len(blocks) < len(by_module):
        block_rows = "".join(f"<tr><td>{html.escape(module_label(b))}</td><td class='num'>{human_bytes(n)}</td>"
                             f"<td><span class='bar' style='width:{max(1, round(200 * n / max(blocks.values())))}px'>"
                             "</span></td></tr>" for b, n in blocks.items())
        parts.append(f"<table><tr><th>block</th><th>bytes</th><th></th></tr>{block_rows}</table>")
    large = len(by_module) > 20
    parts.append(f"<details{'' if large else ' open'}><summary>by module ({len(by_module)})</summary>"
                 f"<table><tr><th>module</th><th>bytes</th><th>tensors</th><th></th></tr>{rows}</table></details>")
    return parts


def _module_sections(g: Graph, colours: dict[str, str], large: bool) -> list[str]:
    saved_by_node: dict[int, list[str]] = {}
    for item in g.saved:
        label = f"{item.attribute} {item.dtype}{list(item.shape)} {human_bytes(item.bytes)}"
        if item.parameter is not None:
            label += f" (= {item.parameter})"
        saved_by_node.setdefault(item.nodes[0], []).append(label)
    parts = []
    names = [module_label(n.module) for n in g.nodes]
    order = list(dict.fromkeys(names))
    for index, name in enumerate(order):
        rows = "".join(
            f"<tr><td>{html.escape(n.op)}</td><td>{html.escape(format_where(n.where, ''))}</td>"
            f"<td>{html.escape('; '.join(saved_by_node.get(n.id, [])))}</td></tr>"
            for n in g.nodes if module_label(n.module) == name)
        count = names.count(name)
        parts.append(f"<details class='module' id='mod-{index}'{'' if large else ' open'}><summary>"
                     f"<span class='swatch' style='background:{colours.get(name, '#fff')}'></span>"
                     f"{html.escape(name)} ({count} nodes)</summary><table><tr><th>op</th><th>made at</th>"
                     f"<th>saved</th></tr>{rows}</table></details>")
    return parts
