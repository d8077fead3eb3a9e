"""Showing a :class:`~torchwork.inspect.Graph`: a text summary, Graphviz source, one self-contained HTML page.

The page holds everything inline (no network): the unreached parameters first, saved memory by module,
a module overview, the node graph (SVG from Graphviz ``dot`` when it is installed, else from a built-in
layered layout), and one collapsible section per module. Large graphs start collapsed.

Example:
    >>> from torchwork.inspect.render import human_bytes
    >>> human_bytes(512), human_bytes(3 * 1024 * 1024)
    ('512 B', '3.0 MiB')
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchwork.doctor.findings import format_where

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.inspect.graphs import Graph

PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
           "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")
LEAF_COLOUR = "#e8e8e8"
OPEN_LIMIT = 150  # graphs with more nodes start collapsed
SUMMARY_NODES = 25
SUMMARY_MODULES = 20


def block_of(module: str) -> str:
    """The repeated block a module belongs to: its name up to the first numeric part (``encoder.layer.3``),
    else its first part; what activation checkpointing would wrap."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:index + 1])
    return parts[0]


def block_totals(by_module: dict[str, int]) -> dict[str, int]:
    """Saved bytes per :func:`block_of` block.

    >>> block_totals({"encoder.layer.0.attention": 5, "encoder.layer.0.output": 2, "pooler.dense": 1})
    {'encoder.layer.0': 7, 'pooler': 1}
    """
    totals: dict[str, int] = {}
    for module, count in by_module.items():
        key = block_of(module) if module else ""
        totals[key] = totals.get(key, 0) + count
    return totals


def human_bytes(count: int) -> str:
    """Bytes in B / KiB / MiB / GiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB" and value < 1024 ** 2:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value / 1024:.1f} GiB"


def module_label(module: str | None) -> str:
    return module if module else "(no module)"


# ---------------------------------------------------------------------------------------------- text
def text_summary(g: Graph) -> str:
    """A compact, stable summary: counts, unreached parameters, saved bytes by module, the first nodes."""
    params = sum(1 for leaf in g.leaves if leaf.is_parameter)
    activation = [s for s in g.saved if s.parameter is None]
    lines = [f"autograd graph: {len(g.nodes)} nodes, {len(g.leaves)} leaves ({params} parameters), "
             f"output shape {tuple(g.output_shape)}",
             f"saved for backward: {human_bytes(g.saved_bytes)} in {len(activation)} tensors "
             f"(+ {human_bytes(sum(s.bytes for s in g.saved) - g.saved_bytes)} of parameters' own storage)"]
    if g.unreached:
        lines.append(f"parameters that get no gradient ({len(g.unreached)}):")
        lines += [f"  {name}: {reason}" for name, reason in g.unreached.items()]
    for item in g.saved:
        if item.stale:
            where = f" by the in-place op at {format_where(item.modified_at)}" if item.modified_at else ""
            lines.append(f"modified in place after it was saved{where}: {item.attribute} {item.shape} of "
                         f"{_op_of(g, item.nodes[0])} (backward will fail)")
    by_module = sorted(g.saved_by_module().items(), key=lambda kv: (-kv[1], kv[0]))
    if len(by_module) > SUMMARY_MODULES:
        blocks = sorted(block_totals(g.saved_by_module()).items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("saved by block (html page: by module):")
        by_module = blocks[:SUMMARY_MODULES] + ([(f"... {len(blocks) - SUMMARY_MODULES} more", sum(
            b for _, b in blocks[SUMMARY_MODULES:]))] if len(blocks) > SUMMARY_MODULES else [])
    elif by_module:
        lines.append("saved by module:")
    if by_module:
        width = max(len(module_label(m)) for m, _ in by_module)
        lines += [f"  {module_label(m):<{width}}  {human_bytes(b):>10}" for m, b in by_module]
    lines.append("nodes" + (f" (first {SUMMARY_NODES} of {len(g.nodes)})" if len(g.nodes) > SUMMARY_NODES else "")
                 + ":")
    shown = g.nodes[:SUMMARY_NODES]
    width = max((len(n.op) for n in shown), default=0)
    for node in shown:
        where = format_where(node.where, "?")
        lines.append(f"  {node.op:<{width}}  {where}  [{module_label(node.module)}]")
    return "\n".join(lines)


def _op_of(g: Graph, node_id: int) -> str:
    return next((n.op for n in g.nodes if n.id == node_id), "?")


# ---------------------------------------------------------------------------------------------- the picture
@dataclass
class Box:
    """One drawn item: a node, a leaf, or a module in the overview."""

    key: str
    title: str
    detail: str
    colour: str
    group: str
    leaf: bool = False
    link: str | None = None


def _colours(g: Graph) -> dict[str, str]:
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(g.modules())}


def _leaf_module(name: str) -> str:
    return name.rpartition(".")[0]


def node_boxes(g: Graph) -> tuple[list[Box], list[tuple[str, str]]]:
    """Every node and leaf, and the edges in the forward direction (input -> user)."""
    colours = _colours(g)
    saved_by_node: dict[int, int] = {}
    for item in g.saved:
        if item.parameter is None:
            saved_by_node[item.nodes[0]] = saved_by_node.get(item.nodes[0], 0) + item.bytes
    boxes = []
    for node in g.nodes:
        where = format_where(node.where, "")
        detail = os.path.basename(where) if where else ""
        if node.id in saved_by_node:
            detail += f" · saves {human_bytes(saved_by_node[node.id])}"
        boxes.append(Box(f"n{node.id}", node.op, detail, colours.get(node.module or "", PALETTE[0]),
                         module_label(node.module)))
    for leaf in g.leaves:
        boxes.append(Box(f"n{leaf.id}", leaf.name, "x".join(map(str, leaf.shape)) or "scalar", LEAF_COLOUR,
                         module_label(_leaf_module(leaf.name)) if leaf.is_parameter else "(inputs)", leaf=True))
    edges = [(f"n{target}", f"n{source}") for source, target in g.edges]
    return boxes, edges


def module_boxes(g: Graph) -> tuple[list[Box], list[tuple[str, str]]]:
    """One box per module (its node count and saved bytes), edges where data crosses modules."""
    colours = _colours(g)
    module_of = {n.id: module_label(n.module) for n in g.nodes}
    counts: dict[str, int] = {}
    for node in g.nodes:
        counts[module_label(node.module)] = counts.get(module_label(node.module), 0) + 1
    saved = {module_label(m): b for m, b in g.saved_by_module().items()}
    order = list(counts)
    boxes = [Box(f"m{i}", name, f"{counts[name]} nodes" + (f" · {human_bytes(saved[name])}" if name in saved else ""),
                 colours.get("" if name == "(no module)" else name, PALETTE[0]), name, link=f"#mod-{i}")
             for i, name in enumerate(order)]
    key = {name: f"m{i}" for i, name in enumerate(order)}
    edges: dict[tuple[str, str], None] = {}
    for source, target in g.edges:
        a, b = module_of.get(target), module_of.get(source)
        if a is not None and b is not None and a != b:
            edges[(key[a], key[b])] = None
    return boxes, list(edges)


def to_dot(g: Graph) -> str:
    """Graphviz source of the node graph, clustered and coloured by module."""
    boxes, edges = node_boxes(g)
    return _dot_source(boxes, edges, clusters=True)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_source(boxes: list[Box], edges: list[tuple[str, str]], clusters: bool) -> str:
    lines = ["digraph autograd {", '  graph [rankdir=TB, fontname="Helvetica", fontsize=10];',
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9];']
    groups: dict[str, list[Box]] = {}
    for box in boxes:
        groups.setdefault(box.group if clusters and not box.leaf else "", []).append(box)
    for index, (group, members) in enumerate(groups.items()):
        indent = "  "
        if group:
            lines.append(f"  subgraph cluster_{index} {{ label={_quote(group)}; style=dashed; color=\"#999999\";")
            indent = "    "
        for box in members:
            label = _quote(box.title)[:-1] + (f"\\n{_quote(box.detail)[1:-1]}" if box.detail else "") + '"'
            attrs = [f"label={label}", f'fillcolor="{box.colour}"', f"tooltip={_quote(box.group)}"]
            if box.leaf:
                attrs.append('shape=note')
            if box.link:
                attrs.append(f"URL={_quote(box.link)}")
            lines.append(f"{indent}{box.key} [{', '.join(attrs)}];")
        if group:
            lines.append("  }")
    lines += [f"  {a} -> {b};" for a, b in edges]
    lines.append("}")
    return "\n".join(lines)


def dot_svg(source: str, dot: str | None = None) -> str | None:
    """SVG from Graphviz ``dot`` (None when it is not installed or fails)."""
    dot = dot or shutil.which("dot")
    if dot is None:
        return None
    try:
        done = subprocess.run([dot, "-Tsvg"], input=source, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or "<svg" not in done.stdout:
        return None
    return done.stdout[done.stdout.index("<svg"):]


# ---------------------------------------------------------------------------------------------- built-in layout
BOX_W, BOX_H, GAP_X, GAP_Y = 200, 34, 18, 26


def layered_svg(boxes: list[Box], edges: list[tuple[str, str]]) -> str:
    """A layered drawing without Graphviz: each box one row below all of its inputs, rows ordered by the
    mean position of their inputs (one sweep), edges as curves."""
    keys = [b.key for b in boxes]
    inputs: dict[str, list[str]] = {k: [] for k in keys}
    users: dict[str, list[str]] = {k: [] for k in keys}
    for a, b in edges:
        if a in inputs and b in inputs:
            inputs[b].append(a)
            users[a].append(b)
    rank = _longest_path_ranks(keys, inputs, users)
    rows: dict[int, list[str]] = {}
    for key in keys:
        rows.setdefault(rank[key], []).append(key)
    position: dict[str, float] = {}
    for r in sorted(rows):
        row = rows[r]
        row.sort(key=lambda k: _mean_position(inputs[k], position))
        for index, key in enumerate(row):
            position[key] = float(index)
    width = max(len(row) for row in rows.values()) if rows else 1
    xy = {k: (GAP_X + position[k] * (BOX_W + GAP_X), GAP_Y + rank[k] * (BOX_H + GAP_Y)) for k in keys}
    total_w = int(GAP_X + width * (BOX_W + GAP_X))
    total_h = int(GAP_Y + (max(rows) + 1 if rows else 1) * (BOX_H + GAP_Y))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" '
             f'viewBox="0 0 {total_w} {total_h}" font-family="Helvetica, Arial, sans-serif" font-size="10">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>']
    for a, b in edges:
        if a in xy and b in xy:
            (x1, y1), (x2, y2) = xy[a], xy[b]
            x1, y1, x2 = x1 + BOX_W / 2, y1 + BOX_H, x2 + BOX_W / 2
            mid = (y1 + y2) / 2
            parts.append(f'<path d="M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}" '
                         'fill="none" stroke="#888" marker-end="url(#arrow)"/>')
    for box in boxes:
        x, y = xy[box.key]
        shape = (f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="{2 if box.leaf else 8}" '
                 f'fill="{box.colour}" stroke="#555"/>')
        text = (f'<text x="{x + BOX_W / 2:.0f}" y="{y + 14:.0f}" text-anchor="middle">{_svg_text(box.title)}</text>'
                f'<text x="{x + BOX_W / 2:.0f}" y="{y + 27:.0f}" text-anchor="middle" fill="#333">'
                f'{_svg_text(box.detail)}</text>')
        item = f'<g><title>{html.escape(box.group)}</title>{shape}{text}</g>'
        if box.link:
            item = f'<a href="{html.escape(box.link)}">{item}</a>'
        parts.append(item)
    parts.append("</svg>")
    return "".join(parts)


def _mean_position(inputs: list[str], position: dict[str, float]) -> float:
    """Where a box's inputs sit in the rows above (-1 when none is placed yet: in a cycle, an input can sit in
    the same row or below)."""
    placed = [position[i] for i in inputs if i in position]
    return sum(placed) / len(placed) if placed else -1.0


def _svg_text(text: str, limit: int = 36) -> str:
    return html.escape(text if len(text) <= limit else text[:limit - 1] + "…")


def _longest_path_ranks(keys: list[str], inputs: dict[str, list[str]], users: dict[str, list[str]]) -> dict[str, int]:
    pending = {k: len(inputs[k]) for k in keys}
    ready = [k for k in keys if pending[k] == 0]
    rank = dict.fromkeys(keys, 0)
    done: set[str] = set()
    waiting = iter(keys)
    while True:
        while ready:
            key = ready.pop()
            done.add(key)
            for user in users[key]:
                if user in done:  # an edge that closes a cycle: drawn pointing up
                    continue
                rank[user] = max(rank[user], rank[key] + 1)
                pending[user] -= 1
                if pending[user] == 0:
                    ready.append(user)
        # A cycle (the module overview has one when a parent runs an op between two children): release the
        # first box still waiting, in drawing order, as if its remaining inputs were above it.
        stuck = next((k for k in waiting if k not in done), None)
        if stuck is None:
            break
        ready.append(stuck)
    for key in keys:  # a source (a leaf) sits just above its first user, not at the top of the page
        if not inputs[key] and users[key]:
            rank[key] = max(0, min(rank[u] for u in users[key]) - 1)
    return rank


def render_svg(boxes: list[Box], edges: list[tuple[str, str]], clusters: bool,
               use_dot: bool | None = None) -> tuple[str, str]:
    """(SVG, which layout made it): Graphviz when installed (or ``use_dot``), else the built-in one."""
    if use_dot is not False:
        svg = dot_svg(_dot_source(boxes, edges, clusters))
        if svg is not None:
            return svg, "graphviz"
    return layered_svg(boxes, edges), "built-in"
