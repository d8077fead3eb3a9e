"""The silent export failures: trace freezing loops and branches, ONNX turning dynamic dims static or
keeping one branch. Each must be refused with the reason, and a refused export writes nothing."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from torchwork.deploy import export, load_artifact, read_manifest
from torchwork.errors import ConfigError, ExportError


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(8, 3)


class RowLoop(Small):
    """Correct in eager for any batch; trace unrolls the loop for the example's batch size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.linear(x[i]) * (i + 1) for i in range(x.shape[0])])


class PerRowBranch(Small):
    """Per-row Python control flow on tensor values."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.linear(row) if row.sum() > 0 else -self.linear(row) for row in x])


class BatchSizeBranch(Small):
    """Branches on the batch size: the ONNX exporter keeps the branch the example took, silently."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 2:
            return self.linear(x) * 2
        return self.linear(x)


class IntReshape(Small):
    """int(x.shape[0]) makes the ONNX exporter keep batch static although it was asked to be dynamic."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).reshape(int(x.shape[0]), 3)


class CondModel(Small):
    """Value-dependent control flow written with torch.cond: pt2 and ONNX keep it, trace cannot."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.mean() > 0, lambda t: self.linear(t) * 2, lambda t: self.linear(t) - 1, (x,))


X = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def _refusal(model: nn.Module, out, formats) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the TorchScript deprecation, tested elsewhere
        with pytest.raises(ExportError) as caught:
            export(model, X, out, formats=formats)
    assert not out.exists(), "a refused export must not leave the artifact directory"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "temporary dir left"
    assert "no silently wrong artifact" in str(caught.value)
    return caught.value.report["refused"]


def test_trace_of_a_loop_over_the_batch_is_refused_with_the_reason(tmp_path):
    # Eager is right at every batch size; the trace is right only at batch 4 and nothing warns.
    refused = _refusal(RowLoop(), tmp_path / "a", ("torchscript",))
    reason = refused["torchscript"]
    assert "batch 64: output 0 has shape [4, 3], eager [64, 3]" in reason
    assert "batch 1" in reason and "torch.jit.trace records one run" in reason


def test_per_row_branches_refused_by_every_format(tmp_path):
    refused = _refusal(PerRowBranch(), tmp_path / "a", ("pt2", "onnx", "torchscript"))
    assert "branches in Python on tensor values" in refused["pt2"]
    assert "branches in Python on tensor values" in refused["onnx"]
    assert "torch.jit.trace records one run" in refused["torchscript"]


def test_onnx_that_keeps_only_one_branch_is_refused(tmp_path):
    refused = _refusal(BatchSizeBranch(), tmp_path / "a", ("onnx",))
    reason = refused["onnx"]
    assert "narrowed dim 0 (batch) of input 'x' to [3, inf]" in reason
    assert "batch 1: outputs differ from eager" in reason


def test_onnx_that_makes_a_dynamic_batch_static_is_refused(tmp_path):
    refused = _refusal(IntReshape(), tmp_path / "a", ("onnx", "pt2"))
    assert "made dim 0 (batch) of input 'x' static (4)" in refused["onnx"]
    assert "rejected the inputs eager accepts" in refused["onnx"]
    assert "torch suggests: batch = 4" in refused["pt2"]


def test_strict_false_writes_the_good_formats_and_says_ok_false(tmp_path):
    out = tmp_path / "cond"
    with pytest.warns(UserWarning, match=r"written without \['torchscript'\]"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            report = export(CondModel(), X, out, formats=("pt2", "onnx", "torchscript"), strict=False)
    assert report["ok"] is False and report["variants"] == ["pt2", "onnx"]
    manifest = read_manifest(out)
    assert set(manifest.variants) == {"pt2", "onnx"} and "torchscript" in manifest.refused
    assert not (out / "model.torchscript.pt").exists()
    assert json.loads((out / "parity.json").read_text())["formats"]["torchscript"]["ok"] is False
    with pytest.raises(ConfigError, match="refused at export"):
        load_artifact(out, "torchscript")
    for x in (-torch.ones(1, 8), torch.ones(64, 8)):  # both branches, batch 1 and 64
        torch.testing.assert_close(load_artifact(out, "onnx")(x), CondModel()(x))


def test_bad_arguments_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="choose from pt2, onnx, torchscript"):
        export(RowLoop(), X, tmp_path / "a", formats="onnx,tflite")
    with pytest.raises(ConfigError, match="add 'onnx' to formats"):
        export(RowLoop(), X, tmp_path / "a", formats="pt2", quantize="int8")
    with pytest.raises(ConfigError, match="tensor or a tuple of tensors"):
        export(RowLoop(), [1, 2], tmp_path / "a")
    assert not (tmp_path / "a").exists()


def test_a_diverged_model_is_refused_though_every_variant_matches_its_nan(tmp_path):
    """A model trained to NaN (lr=1e30 in the image fit) was exported, verified "exact" (NaN against NaN)
    and served, answering every request with a 422: its own outputs are checked now."""
    model = nn.Linear(4, 3).eval()
    with torch.no_grad():
        model.weight[1].fill_(float("nan"))  # every row's outputs hold a NaN
    out = tmp_path / "diverged"
    with pytest.raises(ExportError, match=r"onnx: failed verification on the held-out samples: the model's own "
                                          r"outputs are not finite on 40 of 40 held-out rows: the model is broken"):
        export(model, torch.randn(8, 4), out, formats=("onnx",), samples=torch.randn(40, 4), labels=["a", "b", "c"],
               strict=False, verify_rounds=5)
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary folder left


def test_verify_reports_a_diverged_model_as_not_ok(tmp_path):
    from torchwork.deploy import verify

    model = nn.Linear(4, 3).eval()
    with torch.no_grad():
        model.weight.fill_(10.0)
    export(model, torch.randn(8, 4), tmp_path / "a", formats=("onnx",))
    overflowing = torch.full((6, 4), 3e38)  # near float32's largest: times 10, each output is an infinity
    report = verify(tmp_path / "a", model, inputs=(overflowing,), rounds=5, threads=1)
    assert not report["ok"] and "not finite on 6 of 6 held-out rows" in report["variants"]["eager"]["problem"]


def test_a_quantized_variant_losing_exactly_the_tolerance_passes() -> None:
    """0.59 - 0.58 is 0.010000000000000009 in floating point: one test row in 100 failed a 0.01 tolerance,
    and stopped `torchwork fit --quick` after all its training."""
    from torchwork.deploy.parity import within_tolerance

    row, reference = {"accuracy": 0.58}, {"accuracy": 0.59}
    assert within_tolerance(row, reference, {}, 0.01)["ok"]
    assert not within_tolerance({"accuracy": 0.579}, reference, {}, 0.01)["ok"]
    assert within_tolerance({}, {}, {"top1_agreement": 0.99}, 0.01)["ok"]
