"""``torchwork quickstart --recipe fashion --pretrained``: EfficientNet-Lite0's real weights, a frozen and cached
backbone, and a comparison with the from-scratch CNN of the same run (on a subset: a few CPU minutes)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest


def _fashion_installed() -> bool:
    return shutil.which("dpkg") is not None and subprocess.run(
        ["dpkg", "-s", "dataset-fashion-mnist"], capture_output=True).returncode == 0


@pytest.mark.slow(reason="fine-tunes the real EfficientNet-Lite0 beside a CNN from scratch: about 60 s")
@pytest.mark.skipif(not _fashion_installed(), reason="Debian's dataset-fashion-mnist is not installed "
                                                      "(sudo apt-get install dataset-fashion-mnist)")
def test_pretrained_fashion_beats_the_from_scratch_cnn_in_the_same_run(tmp_path):
    runs = tmp_path / "runs"
    # EfficientNet at 32x32, the smallest size the recipe takes: its cached features cost a third of 64x64's
    # (8.5 s, not 28 s for the 5,000 images) and, with 10 head epochs (0.3 s each), it beats the CNN by 16 points
    # on the 1,000 test images (0.818 against 0.659, seed 0; 6 epochs at 64x64: 0.846)
    settings = [f"run_dir={runs}", "subset=3000", "epochs=3", "threads=1", "eval_subset=1000",
                "pretrained_epochs=10", "pretrained_size=32", "verify_rounds=5"]
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "quickstart", "--recipe", "fashion", "--pretrained",
                           *sum((["--set", s] for s in settings), [])],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    comparison = summary["pretrained"]
    scratch, pretrained = comparison["models"]["scratch_cnn"], comparison["models"]["efficientnet_lite0_frozen"]
    assert comparison["test_images"] == 1000
    assert scratch["accuracy"] == summary["test"]["accuracy"]  # the same test images for both
    assert scratch["accuracy"] > 0.5, "the from-scratch CNN must be a real baseline, not an untrained one"
    assert pretrained["accuracy"] > scratch["accuracy"] and comparison["beats_scratch"], comparison["models"]
    assert "294 of 296 model tensors loaded" in comparison["load_report"]
    assert "_conv_stem.weight adapted from 3 to 1 input channel(s)" in done.stdout
    assert "the pretrained model beats the from-scratch CNN" in done.stdout
