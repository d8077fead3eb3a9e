"""Attention fusion before INT8 (torchwork.deploy.fusion): a real transformers BERT, exported by the dynamo
exporter, fused into ONNX Runtime's Attention, computing what the exported graph does with any padding, and
quantized as QAttention; graphs it does not fit fall back to plain INT8 and say why. The float fallback runs
the rows INT8 is unsure of cut to their own longest."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import torchwork.deploy.fallback as fallback
from torchwork.deploy import export, load_artifact, read_manifest
from torchwork.deploy.fusion import fuse_attention, fused_matches, split_skip_layer_norms
from torchwork.deploy.runtime import onnx_session
from torchwork.errors import ConfigError, ExportError

LAYERS, VOCAB = 2, 120


class TinyBert(nn.Module):
    """transformers' BertModel (2 layers, 4 heads, hidden 32, random weights) + mean pooling + a head."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64, attn_implementation="sdpa")
        self.encoder = BertModel(config, add_pooling_layer=False)
        self.head = nn.Linear(32, 3)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return self.head((hidden * mask).sum(1) / mask.sum(1).clamp(min=1))


def _batch(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids with a random number of real tokens per row (at least 2), zero-padded after them."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (rows, length), generator=generator)
    real = torch.randint(2, length + 1, (rows,), generator=generator)
    mask = (torch.arange(length)[None, :] < real[:, None]).long()
    return ids * mask, mask


def _feeds(ids: torch.Tensor, mask: torch.Tensor) -> dict[str, np.ndarray]:
    return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    out = tmp_path_factory.mktemp("bert") / "artifact"
    export(TinyBert().eval(), _batch(4, 12, 0), out, formats=("onnx",), input_names=("input_ids", "attention_mask"),
           quantize="int8", quantize_per_channel=True, quantize_attention_mask="attention_mask",
           labels=["a", "b", "c"], quantize_fallback_agreement=1.0, quantize_fallback_margin=1.0,
           calibration=_batch(64, 12, 5))  # every row runs again in float: what the fallback test watches
    return out


def test_the_fused_graph_computes_what_the_exported_one_does_at_any_padding(artifact):
    plain = onnx.load(str(artifact / "model.onnx"))
    fused, counts = fuse_attention(plain, "attention_mask")
    assert counts["attention"] == LAYERS and counts["masks_as_mask_index"] == LAYERS
    assert counts["skip_layer_norms_split"] == 2 * LAYERS
    ops = [node.op_type for node in fused.graph.node]
    assert ops.count("Attention") == LAYERS and "SkipLayerNormalization" not in ops and "Softmax" not in ops
    for node in fused.graph.node:
        if node.op_type == "Attention":  # the padding mask, not an additive bias; no qkv_hidden_sizes
            assert list(node.input)[3:] == ["attention_mask__int32"]
            assert "qkv_hidden_sizes" not in {a.name for a in node.attribute}

    ids, mask = _batch(5, 10, 1)
    session = onnx_session(fused.SerializeToString())
    short = session.run(None, _feeds(ids, mask))[0]
    padded = session.run(None, _feeds(nn.functional.pad(ids, (0, 7)), nn.functional.pad(mask, (0, 7))))[0]
    np.testing.assert_allclose(padded, short, atol=1e-5)  # the mask really hides the padding
    with torch.no_grad():
        eager = TinyBert().eval()(ids, mask).numpy()
    np.testing.assert_allclose(short, eager, atol=1e-4)
    assert fused_matches(plain, fused, [_feeds(ids, mask), _feeds(*_batch(2, 30, 3))]) is None


def test_export_quantizes_the_fused_attention_and_records_it(artifact):
    manifest = read_manifest(artifact)
    fusion = manifest.variants["onnx-int8"].quantization["attention_fusion"]
    assert fusion["applied"] and fusion["attention"] == LAYERS and fusion["checked_on"] > 0
    graph = onnx.load(str(artifact / "model.int8.onnx"))
    ops = [node.op_type for node in graph.graph.node]
    assert ops.count("QAttention") == LAYERS and "Attention" not in ops
    ids, mask = _batch(8, 16, 4)
    with torch.no_grad():
        eager = TinyBert().eval()(ids, mask).numpy()
    int8 = onnx_session(artifact / "model.int8.onnx").run(None, _feeds(ids, mask))[0]
    assert np.abs(int8 - eager).max() < 0.1 * np.abs(eager).max()  # INT8-close, and padding still masked


def test_a_graph_without_attention_falls_back_to_plain_int8_and_says_why(tmp_path):
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.head = nn.Embedding(VOCAB, 16), nn.Linear(16, 3)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.head((self.embed(input_ids) * attention_mask.unsqueeze(-1)).sum(1))

    export(Masked().eval(), _batch(4, 12, 0), tmp_path / "a", formats=("onnx",),
           input_names=("input_ids", "attention_mask"), quantize="int8", quantize_attention_mask="attention_mask")
    fusion = read_manifest(tmp_path / "a").variants["onnx-int8"].quantization["attention_fusion"]
    assert not fusion["applied"] and "no attention block was recognised" in fusion["reason"]
    assert "the unfused graph was quantized" in fusion["reason"]


def test_the_mask_must_be_a_named_input_and_needs_int8(tmp_path):
    with pytest.raises(ConfigError, match="is not one of the model's inputs"):
        export(TinyBert().eval(), _batch(2, 8, 0), tmp_path / "a", formats=("onnx",),
               input_names=("input_ids", "attention_mask"), quantize="int8", quantize_attention_mask="mask")
    with pytest.raises(ConfigError, match="pass quantize='int8'"):
        export(TinyBert().eval(), _batch(2, 8, 0), tmp_path / "b", formats=("onnx",),
               quantize_attention_mask="attention_mask")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    with pytest.raises(ExportError, match="2-D integer input"):
        fuse_attention(onnx.load(str(_float_input_graph(tmp_path))), "x")


def _float_input_graph(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_split_skip_layer_norm_computes_what_onnx_runtime_s_kernel_does():
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(size=8).astype(np.float32) for name in ("gamma", "beta", "bias")}
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y", "", "", "sum"],
                            domain="com.microsoft", epsilon=1e-5, name="sln")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 8])
                                            for n in ("x", "skip")],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 8]) for n in ("y", "sum")],
                              [onnx.numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    feeds = {n: rng.normal(size=(2, 3, 8)).astype(np.float32) for n in ("x", "skip")}
    expected = onnx_session(model.SerializeToString()).run(None, feeds)
    assert split_skip_layer_norms(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Add", "Add", "LayerNormalization"]
    for want, got in zip(expected, onnx_session(model.SerializeToString()).run(None, feeds)):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_the_float_fallback_runs_the_unsure_rows_cut_to_their_own_longest(artifact, monkeypatch):
    entry = read_manifest(artifact).variants["onnx-int8"].fallback
    assert entry["padding_mask"] == "attention_mask" and entry["rows_rerun"] > 0
    widths = []
    cut = fallback.trimmed_to_longest

    def watched(inputs, mask, padded):
        rows = cut(inputs, mask, padded)
        widths.append((int(inputs[mask].sum(1).max()), inputs[0].shape[1], rows[0].shape[1], rows[1].shape[1]))
        return rows

    monkeypatch.setattr(fallback, "trimmed_to_longest", watched)
    ids, mask = _batch(48, 20, 6)
    mask[:, 15:] = 0  # a batch padded past its longest row, as one padded to a fixed width is
    ids = ids * mask
    int8, exact = load_artifact(artifact, "onnx-int8"), load_artifact(artifact, "onnx")
    answers, expected = int8((ids, mask)), exact((ids, mask))
    assert widths == [(15, 20, 15, 15)]  # both inputs cut to the rows' longest, no shorter
    torch.testing.assert_close(answers, expected, atol=1e-5, rtol=1e-5)  # the cut padding changed nothing
