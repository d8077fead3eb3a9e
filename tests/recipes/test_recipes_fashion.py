"""The Fashion-MNIST recipe: a resolution-adaptive CNN, and what each exporter does with it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from torchwork.recipes.fashion import resolution_check
from torchwork.recipes.models import AdaptiveDepthCNN


def test_the_cnn_depth_follows_the_resolution():
    model = AdaptiveDepthCNN(channels=4).eval()
    used = []
    for block in model.blocks:
        block.register_forward_hook(lambda m, a, o: used.append(o.shape[-1]))
    model(torch.rand(1, 1, 28, 28))
    assert used == [14, 7]
    used.clear()
    model(torch.rand(1, 1, 56, 56))
    assert used == [28, 14, 7]


def test_trace_is_refused_for_silently_baking_in_the_depth():
    torch.manual_seed(0)
    verdicts = resolution_check(AdaptiveDepthCNN(channels=4))
    assert verdicts["torchscript-trace"].startswith("REFUSED: traced at 28x28")
    # torch.export either keeps the loop right for every size or refuses: never a silent bake-in
    assert verdicts["pt2-dynamic-resolution"].startswith(("REFUSED", "exported"))


def _fashion_installed() -> bool:
    return shutil.which("dpkg") is not None and subprocess.run(
        ["dpkg", "-s", "dataset-fashion-mnist"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _fashion_installed(), reason="Debian's dataset-fashion-mnist is not installed "
                                                      "(sudo apt-get install dataset-fashion-mnist)")
@pytest.mark.slow(reason="the whole Fashion-MNIST recipe: training, export, INT8, verification")
def test_fashion_recipe_runs_end_to_end(tmp_path):
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "quickstart", "--recipe", "fashion", "--set",
                           f"run_dir={runs}", "--set", "subset=1500", "--set", "epochs=1", "--set", "threads=1",
                           "--set", "verify_rounds=5"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run,) = list(runs.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    assert (run / "report.html").is_file() and (run / "artifact" / "manifest.json").is_file()
    assert summary["resolution_check"]["torchscript-trace"].startswith("REFUSED")
    assert done.stdout.strip().splitlines()[-1] == f"serve it: torchwork serve {run / 'artifact'}"
