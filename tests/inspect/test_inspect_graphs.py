"""Known graphs with known answers: cuts, no_grad, unused and frozen parameters, an in-place op on a saved
tensor, saved bytes summed by hand, and a stable text summary."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from torchwork.inspect import capture, graph, measure_saved_bytes, trace

HERE = os.path.abspath(__file__)


def line_of(marker: str) -> int:
    """The line of this file that ends with the comment ``# <marker>``."""
    with open(HERE) as handle:
        for number, text in enumerate(handle, 1):
            if text.rstrip().endswith(f"# {marker}") and "line_of" not in text:
                return number
    raise AssertionError(marker)


class Mixed(nn.Module):
    """One parameter group for each reason a gradient can be missing."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.detached = nn.Linear(4, 4)
        self.no_grad_layer = nn.Linear(4, 4)
        self.scale = nn.Linear(4, 1)
        self.side = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.fixed = nn.Linear(4, 4).requires_grad_(False)
        self.gain = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.used(x)  # USED
        d = self.detached(x).detach()  # CUT-DETACH
        with torch.no_grad():
            n = self.no_grad_layer(x)  # NO-GRAD
        s = self.scale(x).mean().item()  # CUT-ITEM
        self.side(x)  # SIDE
        f = self.fixed(x)
        return (h + d + n + f) * s * self.gain.data  # CUT-DATA


@pytest.fixture(scope="module")
def mixed_graph():
    torch.manual_seed(0)
    model = Mixed()
    with capture(model) as cap:
        loss = model(torch.randn(8, 4)).pow(2).mean()
    return graph(loss, model, capture=cap)


def test_each_unreached_parameter_has_its_reason_and_line(mixed_graph) -> None:
    reasons = {name: (r.kind, r.where[1] if r.where else None) for name, r in mixed_graph.unreached.items()}
    assert reasons == {
        "detached.weight": ("cut", line_of("CUT-DETACH")), "detached.bias": ("cut", line_of("CUT-DETACH")),
        "no_grad_layer.weight": ("no_grad", line_of("NO-GRAD")), "no_grad_layer.bias": ("no_grad", line_of("NO-GRAD")),
        "scale.weight": ("cut", line_of("CUT-ITEM")), "scale.bias": ("cut", line_of("CUT-ITEM")),
        "side.weight": ("unconnected", line_of("SIDE")), "side.bias": ("unconnected", line_of("SIDE")),
        "unused.weight": ("unused", None), "unused.bias": ("unused", None),
        "fixed.weight": ("frozen", None), "fixed.bias": ("frozen", None),
        "gain": ("cut", line_of("CUT-DATA")),
    }
    assert str(mixed_graph.unreached["detached.weight"]).startswith("cut by .detach() at ")
    assert str(mixed_graph.unreached["scale.bias"]).startswith("cut by .item() at ")
    assert str(mixed_graph.unreached["gain"]).startswith("cut by .data at ")
    assert all(r.where is None or r.where[0] == HERE for r in mixed_graph.unreached.values())


def test_nodes_carry_the_line_and_module_that_made_them(mixed_graph) -> None:
    addmm = [n for n in mixed_graph.nodes if n.op == "AddmmBackward0"]
    assert [(n.module, n.where, n.source) for n in addmm] == [("used", (HERE, line_of("USED")), "torchwork")]
    assert {leaf.name for leaf in mixed_graph.leaves} == {"used.weight", "used.bias"}
    node_ids = {n.id for n in mixed_graph.nodes} | {leaf.id for leaf in mixed_graph.leaves}
    assert all(a in node_ids and b in node_ids for a, b in mixed_graph.edges)
    assert mixed_graph.nodes[0].id == mixed_graph.root and mixed_graph.nodes[0].op == "MeanBackward0"


def test_the_doctor_and_inspect_share_one_graph_walk() -> None:
    from torchwork.doctor.checks import broken_graph
    from torchwork.inspect import walk

    assert broken_graph.reached_leaves is walk.reached_leaves and broken_graph.CUT_LABELS is walk.CUT_LABELS


def test_inplace_op_on_a_saved_tensor_is_named_with_its_line() -> None:
    w = nn.Parameter(torch.randn(3))
    with capture() as cap:
        y = torch.sigmoid(w * 2)  # sigmoid saves its result
        y.mul_(2)  # INPLACE
        loss = y.sum()
    g = graph(loss, capture=cap)
    (stale,) = [s for s in g.saved if s.stale]
    assert stale.attribute == "result" and stale.shape == (3,) and stale.modified_at == (HERE, line_of("INPLACE"))
    assert "modified by an inplace operation" in stale.stale
    assert "backward will fail" in str(g)
    with pytest.raises(RuntimeError, match="inplace operation"):  # the known answer: backward does fail
        loss.backward()


def small_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))


def test_saved_bytes_of_a_small_mlp_equal_the_hand_sum() -> None:
    model = small_mlp()
    g = trace(model, torch.randn(4, 5), loss=lambda out: out.pow(2).sum())
    # Linear 0 keeps its input (4x5 floats, for its weight's gradient); ReLU keeps its result (4x7), which is
    # also linear 2's input (counted once); pow keeps its input (4x3). Linear 2 keeps W2.t() (its own weight).
    assert g.saved_by_module() == {"0": 4 * 5 * 4, "1": 4 * 7 * 4, "": 4 * 3 * 4}
    assert g.saved_bytes == 240
    assert g.saved_by_module(include_parameters=True)["2"] == 7 * 3 * 4
    (weight,) = [s for s in g.saved if s.parameter]
    assert weight.parameter == "2.weight" and weight.shape == (7, 3)  # W2.t()
    _, measured, _ = measure_saved_bytes(lambda: model(torch.randn(4, 5)).pow(2).sum(), model)
    assert measured == {"total": 240, "by_module": g.saved_by_module()}


def test_anomaly_mode_lines_are_used_without_a_capture() -> None:
    model = small_mlp()
    with torch.autograd.set_detect_anomaly(True):
        out = model(torch.randn(2, 5)).sum()  # ANOMALY
    g = graph(out, model)
    assert g.nodes[0].source == "pytorch" and g.nodes[0].where == (HERE, line_of("ANOMALY"))
    assert g.unreached == {}


def test_no_capture_means_reason_unknown() -> None:
    model = small_mlp()
    out = model[0](torch.randn(2, 5)).sum()
    g = graph(out, model)
    assert {r.kind for r in g.unreached.values()} == {"unknown"} and set(g.unreached) == {"2.weight", "2.bias"}


def test_text_summary_is_stable() -> None:
    model = small_mlp()
    line = line_of("SUMMARY")
    with capture(model) as cap:
        out = model(torch.randn(4, 5)).pow(2).sum()  # SUMMARY
    g = graph(out, model, capture=cap)
    where = f"{os.path.relpath(HERE) if not os.path.relpath(HERE).startswith('..') else HERE}:{line}"
    assert str(g) == f"""autograd graph: 7 nodes, 4 leaves (4 parameters), output shape ()
saved for backward: 240 B in 3 tensors (+ 84 B of parameters' own storage)
saved by module:
  1                 112 B
  0                  80 B
  (no module)        48 B
nodes:
  SumBackward0    {where}  [(no module)]
  PowBackward0    {where}  [(no module)]
  AddmmBackward0  {where}  [2]
  ReluBackward0   {where}  [1]
  AddmmBackward0  {where}  [0]
  TBackward0      {where}  [0]
  TBackward0      {where}  [2]"""
    assert "digraph autograd" in g.to_dot() and g.to_dot().count("->") == len(g.edges)


def test_bad_input_is_a_clear_error() -> None:
    from torchwork.errors import ConfigError

    with pytest.raises(ConfigError, match="needs a tensor"):
        graph([1, 2])  # type: ignore[arg-type]
    with torch.no_grad(), pytest.raises(ConfigError, match="no tensor with an autograd history"):
        trace(small_mlp(), torch.randn(2, 5))


def test_the_stdlib_inspect_is_still_the_stdlib() -> None:
    import inspect as stdlib_inspect

    import torchwork.inspect

    assert hasattr(stdlib_inspect, "signature") and stdlib_inspect is not torchwork.inspect
    assert torchwork.inspect.graph is graph and torchwork.inspect.capture is capture  # functions, not modules


def test_leaves_sit_just_above_their_user_in_the_built_in_layout() -> None:
    from torchwork.inspect.render import _longest_path_ranks

    keys = ["w", "x", "a", "b"]  # x -> a -> b, and the leaf w feeds only b
    inputs = {"w": [], "x": [], "a": ["x"], "b": ["a", "w"]}
    users = {"w": ["b"], "x": ["a"], "a": ["b"], "b": []}
    assert _longest_path_ranks(keys, inputs, users) == {"w": 1, "x": 0, "a": 1, "b": 2}
