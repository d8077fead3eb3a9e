"""The HTML page: self-contained, both layouts (Graphviz and built-in), renders in headless Chromium without
console errors; a 6-layer BERT's page stays under 2 MB and starts collapsed."""

from __future__ import annotations

import shutil

import pytest
import torch
from chromium_page import CHROMIUM, render_in_chromium
from minilm_model import load_minilm
from test_inspect_graphs import Mixed

from torchwork.inspect import capture, graph, trace
from torchwork.inspect.render import OPEN_LIMIT

DOT = shutil.which("dot")


@pytest.fixture(scope="module")
def mixed_graph():
    torch.manual_seed(0)
    model = Mixed()
    with capture(model) as cap:
        loss = model(torch.randn(8, 4)).pow(2).mean()
    return graph(loss, model, capture=cap)


def assert_self_contained(text: str) -> None:
    for forbidden in ("http://", "https://", "<script src", "<link ", "@import"):
        assert forbidden not in text.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
            'xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace("http://www.w3.org/Graphics/SVG/1.1/DTD", ""), \
            forbidden


@pytest.mark.parametrize("use_dot", [False, pytest.param(True, marks=pytest.mark.skipif(
    DOT is None, reason="Graphviz dot is not installed (Debian graphviz; make system-deps installs it)"))])
def test_page_lists_unreached_first_and_draws_the_graph(mixed_graph, tmp_path, use_dot) -> None:
    page = tmp_path / "graph.html"
    mixed_graph.to_html(page, use_dot=use_dot)
    text = page.read_text()
    assert_self_contained(text)
    assert f"Layout: {'graphviz' if use_dot else 'built-in'}." in text
    assert text.index("will get no gradient") < text.index("Saved for backward") < text.index("<svg")
    assert "detached.weight" in text and "cut by .detach() at" in text
    assert text.count("<svg") == 2 and "AddmmBackward0" in text and "MeanBackward0" in text
    assert "<details class='module' id='mod-0' open>" in text  # small graph: open


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.mark.slow
def test_bert_page_is_small_and_collapsed(minilm, tmp_path) -> None:
    ids = torch.randint(0, 30000, (2, 32))
    g = trace(minilm, ids, loss=lambda out: out.last_hidden_state.sum() + out.pooler_output.sum())
    assert len(g.nodes) > OPEN_LIMIT and g.unreached == {}
    for use_dot in (False, None):
        page = tmp_path / f"bert-{use_dot}.html"
        g.to_html(page, use_dot=use_dot)
        text = page.read_text()
        assert page.stat().st_size < 2_000_000, page.stat().st_size
        assert_self_contained(text)
        assert "<details class='graph'>" in text and " open>" not in text  # collapsed by default
        assert "encoder.layer.5.attention.self" in text


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make system-deps installs it)")
def test_page_renders_in_headless_chromium_without_console_errors(mixed_graph, tmp_path) -> None:
    broken = tmp_path / "broken.html"  # the check itself must be able to fail
    broken.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    _, errors = render_in_chromium(broken, tmp_path)
    assert errors, "a page with a script error must log a console error"
    for use_dot in ([False, True] if DOT else [False]):
        page = tmp_path / f"graph-{use_dot}.html"
        mixed_graph.to_html(page, use_dot=use_dot)
        screenshot, errors = render_in_chromium(page, tmp_path)
        assert not errors, errors
        assert screenshot.stat().st_size > 20_000


class OpBetweenChildren(torch.nn.Module):
    """The top-level module runs an operation between two children, so the module overview has a cycle
    (body -> (no module) -> head -> (no module))."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).relu() * 2).logsumexp(1)


def test_built_in_layout_draws_a_module_overview_with_a_cycle(tmp_path) -> None:
    torch.manual_seed(0)
    model = OpBetweenChildren()
    with capture(model) as cap:
        loss = model(torch.randn(4, 8)).mean()
    g = graph(loss, model, capture=cap)
    page = tmp_path / "cycle.html"
    g.to_html(page, use_dot=False)
    text = page.read_text()
    assert "Layout: built-in." in text and text.count("<svg") == 2
    assert_self_contained(text)
    for name in ("body", "head", "(no module)"):
        assert f">{name}<" in text
