"""A transformer's ONNX graph fused for ONNX Runtime before INT8: one ``Attention`` node per layer, quantizable.

The dynamo exporter writes attention as some 20 small nodes per layer (Q/K/V MatMuls, head reshapes and
transposes, a masked softmax that guards fully masked rows with IsNaN/Where). On the fine-tuned MiniLM at
batch 32 those took about half of the INT8 graph's time: the integer MatMuls were only a third of it.
:func:`fuse_attention` rewrites them with onnxscript's ONNX Runtime fusions into ``com.microsoft.Attention``
and then makes that node one ONNX Runtime's dynamic quantizer turns into ``QAttention`` (one INT8 product for
Q, K and V):

- the Q/K/V weights, which the fusion joins with a ``Concat`` at run time, are joined once, here;
- ``qkv_hidden_sizes`` is dropped when Q, K and V are the same size (the quantizer skips nodes that carry it);
- the additive mask (``attention_bias``, which ``QAttention`` lacks) is replaced by the model's own 2-D padding
  mask as ``mask_index`` (1 = token, 0 = padding);
- ``SkipLayerNormalization`` is split back into ``Add`` + ``LayerNormalization``: ONNX Runtime's CPU kernel for
  it took 21-25% of the INT8 graph's time, ``LayerNormalization`` 4% (see :func:`torchwork.deploy.runtime.onnx_session`,
  which keeps ONNX Runtime from fusing it again).

The fused graph is only kept when it computes what the exported one does on the given inputs
(:func:`fused_matches`); the caller falls back to the plain graph otherwise.

Example:
    >>> from torchwork.deploy.fusion import split_skip_layer_norms
    >>> import onnx
    >>> split_skip_layer_norms(onnx.ModelProto())
    0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from torchwork.errors import ExportError

_INTEGER_TYPES = (6, 7)  # TensorProto.INT32, INT64


def fuse_attention(model: Any, mask_input: str) -> tuple[Any, dict[str, int]]:
    """``model`` (an ``onnx.ModelProto``) with its attention fused and quantizable, and what was rewritten.

    ``mask_input``: the graph input that holds the 2-D padding mask. Raises
    :class:`~torchwork.errors.ExportError` when nothing could be fused.
    """
    import onnx
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    inputs = {i.name: i for i in model.graph.input}
    mask = inputs.get(mask_input)
    if mask is None or mask.type.tensor_type.elem_type not in _INTEGER_TYPES \
            or len(mask.type.tensor_type.shape.dim) != 2:
        raise ExportError(f"attention fusion needs {mask_input!r} to be a 2-D integer input of the graph (the "
                          f"padding mask); the graph's inputs are {sorted(inputs)}.")
    try:
        fused_ir, counts = optimize_for_ort(ir.from_proto(model))
        fused = ir.to_proto(fused_ir)
    except Exception as error:  # the rewriter raises its own errors on graphs it does not know
        raise ExportError(f"onnxscript's ONNX Runtime fusions failed: {type(error).__name__}: {error}") from error
    attention = len(_attention_nodes(fused))
    if not attention:
        raise ExportError(f"no attention block was recognised in the graph (fusions applied: "
                          f"{ {k: v for k, v in counts.items() if v} }).")
    joined = _join_constant_concats(fused)  # rewrites the node list: look the Attention nodes up after it
    masks = _quantizable_attention(fused, mask_input)
    split = split_skip_layer_norms(fused)
    _drop_dead_nodes(fused)
    onnx.checker.check_model(fused)
    return fused, {"attention": attention, "weights_joined": joined, "masks_as_mask_index": masks,
                   "skip_layer_norms_split": split}


def fused_matches(plain: Any, fused: Any, feeds: Iterable[Mapping[str, Any]], atol: float = 1e-4,
                  rtol: float = 1e-3) -> str | None:
    """None when the two float graphs give the same outputs on every feed, else what differed."""
    import numpy as np

    from torchwork.deploy.runtime import onnx_session

    sessions = [onnx_session(m.SerializeToString()) for m in (plain, fused)]
    checked = 0
    for feed in feeds:
        expected, actual = (s.run(None, dict(feed)) for s in sessions)
        for a, b in zip(expected, actual):
            if a.shape != b.shape or not np.allclose(a, b, atol=atol, rtol=rtol):
                worst = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("inf")
                return f"the fused graph's outputs differ from the exported graph's (max abs {worst:.3g})"
        checked += 1
    return None if checked else "no inputs to check the fused graph on"


def split_skip_layer_norms(model: Any) -> int:
    """Rewrite every ``com.microsoft.SkipLayerNormalization`` as (bias ``Add``), ``Add``, ``LayerNormalization``."""
    from onnx import helper

    graph = model.graph
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    nodes, split = [], 0
    for node in graph.node:
        if node.op_type != "SkipLayerNormalization":
            nodes.append(node)
            continue
        if any(name and name in used for name in node.output[1:3]):
            raise ExportError(f"{node.name}: its mean or inverse-deviation output is used; it cannot be split.")
        x, skip, gamma = node.input[0], node.input[1], node.input[2]
        beta = node.input[3] if len(node.input) > 3 else ""
        epsilon = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "epsilon"), 1e-12)
        prefix = node.name or node.output[0]
        if len(node.input) > 4 and node.input[4]:
            nodes.append(helper.make_node("Add", [x, node.input[4]], [f"{prefix}_biased"], name=f"{prefix}_bias"))
            x = f"{prefix}_biased"
        total = node.output[3] if len(node.output) > 3 and node.output[3] else f"{prefix}_sum"
        nodes.append(helper.make_node("Add", [x, skip], [total], name=f"{prefix}_skip"))
        nodes.append(helper.make_node("LayerNormalization", [total, gamma] + ([beta] if beta else []),
                                      [node.output[0]], name=f"{prefix}_norm", axis=-1, epsilon=epsilon))
        split += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return split


def _join_constant_concats(model: Any) -> int:
    """Replace each ``Concat`` of initializers by one initializer (the fused Q/K/V weights and biases)."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    nodes, joined = [], 0
    for node in graph.node:
        if node.op_type == "Concat" and node.input and all(name in initializers for name in node.input):
            axis = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "axis")
            value = np.concatenate([numpy_helper.to_array(initializers[name]) for name in node.input], axis=axis)
            tensor = numpy_helper.from_array(value, node.output[0])
            graph.initializer.append(tensor)
            initializers[node.output[0]] = tensor
            joined += 1
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return joined


def _attention_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if n.op_type == "Attention" and n.domain == "com.microsoft"]


def _quantizable_attention(model: Any, mask_input: str) -> int:
    """Drop equal ``qkv_hidden_sizes``; feed the 2-D padding mask as ``mask_index`` instead of an additive bias."""
    from onnx import TensorProto, helper

    cast = f"{mask_input}__int32"
    masks = 0
    for node in _attention_nodes(model):
        sizes = next((list(helper.get_attribute_value(a)) for a in node.attribute if a.name == "qkv_hidden_sizes"), None)
        if sizes is not None and len(set(sizes)) == 1:
            kept = [a for a in node.attribute if a.name != "qkv_hidden_sizes"]
            del node.attribute[:]
            node.attribute.extend(kept)
        inputs = list(node.input)
        has_bias = len(inputs) > 5 and inputs[5]
        has_index = len(inputs) > 3 and inputs[3]
        if has_bias and not has_index and not any(inputs[4:5]) and not any(inputs[6:]):
            del node.input[:]
            node.input.extend([*inputs[:3], cast])
            masks += 1
    if masks:
        model.graph.node.insert(0, helper.make_node("Cast", [mask_input], [cast], to=TensorProto.INT32,
                                                    name=f"{mask_input}_as_mask_index"))
    return masks


def _drop_dead_nodes(model: Any) -> None:
    """Remove nodes (and initializers) nothing reads any more, e.g. the additive mask's chain."""
    graph = model.graph
    while True:
        used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if not any(name in used for name in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    used = {name for node in graph.node for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
