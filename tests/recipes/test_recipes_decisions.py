"""Timing decisions on a machine made busy by a test-owned spinning process: two runs choose the same
precision, or each says which rule kept the default and the `--set` that pins it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from torchwork.recipes.sentiment_shared import choose_precision

SPIN = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"


def test_precision_choice_under_a_busy_neighbour_is_stable_or_says_why():
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]  # both cores busy
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 3))
        batch = (torch.randn(64, 256), torch.randint(0, 3, (64,)))
        runs = [choose_precision("auto", model, batch, nn.CrossEntropyLoss(), steps=8) for _ in range(2)]
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    for chosen, timing in runs:
        assert timing["pin"] == f"--set precision={chosen}"
        assert timing["spread_ms"] >= 0 and timing["rule"]
        if chosen == "bf16":  # only a win beyond the noise moves off the default
            assert timing["step_ms_32"] - timing["step_ms_bf16"] > timing["spread_ms"]
    (first, first_timing), (second, second_timing) = runs
    assert first == second or {first_timing["rule"], second_timing["rule"]} & {
        "fp32 kept: bf16's gain is within the timing spread", "fp32 kept: bf16 is not >= 10% faster"}


@pytest.mark.slow(reason="two real recipe runs, the second from the first's config.yaml")
def test_train_from_a_runs_config_yaml_reproduces_it(tmp_path):
    import json

    import yaml

    settings = [f"run_dir={tmp_path / 'runs'}", "subset=200", "epochs=2", "export_formats=onnx", "quantize=false",
                "verify_rounds=5"]
    first = subprocess.run([sys.executable, "-m", "torchwork.cli", "train", "sentiment",
                            *[part for s in settings for part in ("--set", s)]],
                           capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    (run,) = (tmp_path / "runs").iterdir()
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["recipe"] == "sentiment" and resolved["precision"] in ("32", "bf16")  # measured, pinned
    assert isinstance(resolved["threads"], int) and resolved["threads"] >= 1 and resolved["subset"] == 200
    again = subprocess.run([sys.executable, "-m", "torchwork.cli", "train", str(run / "config.yaml")],
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    (second,) = [p for p in (tmp_path / "runs").iterdir() if p != run]
    assert f"precision: {resolved['precision']} (as configured)" in again.stdout
    summaries = [json.loads((r / "summary.json").read_text()) for r in (run, second)]
    for key in ("test", "baseline", "precision", "epochs_run"):
        assert summaries[0][key] == summaries[1][key], key


def test_strategy_timings_that_swap_around_the_threshold_keep_whole_fine_tuning():
    from torchwork.recipes.transformer_strategy import strategy_rule

    # two runs on a noisy machine: whole-model steps of 1.6 s and 1.45 s at the median (320 s and 290 s for
    # 200 steps, either side of the 300 s budget), spreads overlapping
    first = strategy_rule([1.4, 1.6, 1.8], [0.1, 0.1, 0.1], [0.05, 0.05, 0.05], trained_steps=200, cache_batches=50)
    second = strategy_rule([1.3, 1.45, 1.6], [0.1, 0.1, 0.1], [0.05, 0.05, 0.05], trained_steps=200,
                           cache_batches=50)
    assert first["chosen"] == second["chosen"] == "full"
    assert first["pin"] == "--set transformer_strategy=full" and "less the timing spread" in first["rule"]
    clear = strategy_rule([4.0, 4.1, 4.2], [0.1, 0.1, 0.1], [0.05, 0.05, 0.05], trained_steps=200, cache_batches=50)
    assert clear["chosen"] == "cached" and clear["pin"] == "--set transformer_strategy=cached"
