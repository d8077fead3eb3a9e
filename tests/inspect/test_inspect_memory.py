"""Memory view on a transformer: MiniLM's saved-tensor bytes per module, from the graph, against activation
memory measured independently with saved-tensor hooks during the same forward (CPU)."""

from __future__ import annotations

import pytest
import torch
from minilm_model import load_minilm

from torchwork.inspect import graph, measure_saved_bytes


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.mark.slow
def test_minilm_saved_bytes_per_module_match_saved_tensor_hooks_within_5_percent(minilm) -> None:
    torch.manual_seed(0)
    ids = torch.randint(0, 30000, (4, 64))

    def forward() -> torch.Tensor:
        out = minilm(ids)
        return out.last_hidden_state.pow(2).mean() + out.pooler_output.sum()

    loss, measured, cap = measure_saved_bytes(forward, minilm)
    g = graph(loss, minilm, capture=cap)
    by_module = g.saved_by_module()
    assert len(by_module) > 60  # every layer's query/attention/dense/LayerNorm/dropout/activation
    assert abs(g.saved_bytes - measured["total"]) <= 0.05 * measured["total"]
    for module, expected in measured["by_module"].items():
        assert abs(by_module.get(module, 0) - expected) <= 0.05 * expected, module
    # Attention probabilities dominate: 12 heads x 64 x 64 floats per sequence, more than the 384-wide dense
    attention = by_module["encoder.layer.0.attention.self"]
    assert attention > by_module["encoder.layer.0.attention.output.dense"]
    assert attention >= 4 * 12 * 64 * 64 * 4
