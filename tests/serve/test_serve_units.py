"""The server beside its neighbours: ``torchwork serve --help`` imports nothing heavy, and an artifact is served through
torchwork.deploy. Each serve module's own tests sit beside it (tests/serve/test_<module>.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch
from serve_fixtures import SRC


def test_cli_help_does_not_import_heavy_modules():
    code = ("import sys; from torchwork.cli import build_parser; build_parser().parse_args(['serve', 'x']); "
            "print(sorted(m for m in ('torch', 'fastapi', 'pydantic', 'onnxruntime', 'uvicorn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)})
    assert out.stdout.strip() == "[]", out.stderr


def test_serving_an_artifact_uses_torchwork_deploy(tmp_path):
    from torchwork.deploy import export
    from torchwork.serve import predictor_from_artifact

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    export(model, (torch.randn(2, 4),), tmp_path / "artifact", formats=("onnx",), dynamic_batch=True)
    predictor = predictor_from_artifact(tmp_path / "artifact")
    assert (predictor.kind, predictor.item_shape, predictor.labels, predictor.variant) == ("tensor", (4,), None,
                                                                                          "onnx")
    items = [[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]]
    rows = predictor.predict_batch(items)
    with torch.no_grad():
        np.testing.assert_allclose(rows, model(torch.tensor(items)).numpy(), atol=1e-5)  # raw outputs, no labels
