"""Operator-level advice where it pays, from the model's modules and from the exported ONNX graph.

Example:
    >>> import torch
    >>> from torchwork.deploy.advice import model_advice
    >>> model_advice(torch.nn.Sequential(torch.nn.EmbeddingBag(10, 4)), ["onnx"])[0][:40]
    "EmbeddingBag '0' exports to an ONNX Loop"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

EMBEDDING_BAG = (
    "EmbeddingBag {name!r} exports to an ONNX Loop (one iteration per bag), which ran about 10-12x slower in "
    "ONNX Runtime at batch 64 than nn.Embedding followed by a (masked) mean with the same outputs (measure "
    "yours: benchmarks/deploy_embeddingbag.py). For the ONNX artifact, use Embedding + mean.")
LOOP_OPS = ("Loop", "Scan", "SequenceEmpty", "SequenceInsert")


def model_advice(model: Any, formats: Sequence[str]) -> list[str]:
    """Advice from the model's modules, for the formats being exported."""
    from torch import nn

    advice = []
    if "onnx" in formats:
        for name, module in model.named_modules():
            if isinstance(module, nn.EmbeddingBag):
                advice.append(EMBEDDING_BAG.format(name=name or type(module).__name__))
    return advice


def graph_advice(ops: Mapping[str, int]) -> list[str]:
    """Advice from the operator counts of an exported ONNX graph."""
    loops = {op: n for op, n in ops.items() if op in LOOP_OPS}
    if not loops:
        return []
    return [f"The ONNX graph contains {loops}: ONNX Runtime runs a Loop body op by op, once per iteration, "
            "with no fusion across iterations. Vectorize the looped computation in the model (a Python loop "
            "over rows or an EmbeddingBag are the usual sources)."]
