"""The autograd graph of one loss: which parameters get no gradient and why, and what backward keeps alive.

Run: python examples/inspect_graph.py   (writes graph.html)
"""
import torch
from torch import nn

from torchwork.inspect import capture, graph

torch.manual_seed(0)
model = nn.ModuleDict({"body": nn.Linear(8, 8), "frozen": nn.Linear(8, 8), "head": nn.Linear(8, 2)})
x = torch.randn(32, 8)
with capture(model) as cap:  # records where each node was made, and what cut the graph
    with torch.no_grad():
        x = model["frozen"](x)
    loss = model["head"](model["body"](x).relu()).logsumexp(1).mean()
g = graph(loss, model, capture=cap)
print(g.unreached["frozen.weight"])
print(g.saved_by_module(), g.saved_bytes)
g.to_html("graph.html")
