"""``torchwork verify --compile``: a ``compiled`` row (the eager reference under torch.compile) beside the
artifact's variants, with its parity, speed and compile seconds, never the one to deploy."""

from __future__ import annotations

import json

import pytest
import torch
from deploy_helpers import digits, digits_mlp

from torchwork.cli import main as cli_main
from torchwork.deploy import export, format_report, verify


@pytest.fixture(scope="module")
def mlp_artifact(tmp_path_factory):
    data = digits()
    out = tmp_path_factory.mktemp("compiled-row") / "mlp"
    export(digits_mlp(), data["x_train"][:8], out, formats=("pt2", "onnx"), samples=data["x_test"][:200],
           targets=data["y_test"][:200], verify_rounds=2)
    return out


def test_verify_has_no_compiled_row_unless_asked(mlp_artifact):
    assert "compiled" not in verify(mlp_artifact, rounds=3, threads=1)["variants"]


@pytest.mark.slow
def test_verify_compile_adds_a_compiled_row_that_matches_eager_and_is_not_deployed(mlp_artifact, capsys):
    torch._dynamo.reset()
    assert cli_main(["verify", str(mlp_artifact), "--compile", "--json", "--rounds", "5", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    row = report["variants"]["compiled"]
    assert row["kind"] == "compiled" and row["ok"] and row["max_abs"] <= 1e-5, row
    assert row["compile_seconds"] > 0 and row["latency_b1_ms"] > 0 and row["throughput_ratio"] > 0
    assert report["deploy"] != "compiled" and "choice" not in row
    assert "compiled: the reference under torch.compile" in format_report(report)
    torch._dynamo.reset()
