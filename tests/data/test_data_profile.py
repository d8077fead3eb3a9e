"""The profiler tells a slow __getitem__ (pipeline-bound) from a slow model step (model-bound)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset

from torchwork.data import profile_loader
from torchwork.data.profile import ProfileRow, _verdict

SRC = str(Path(__file__).resolve().parents[2] / "src")


class Items(Dataset):
    def __init__(self, seconds_per_item: float) -> None:
        self.seconds = seconds_per_item

    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.seconds:
            time.sleep(self.seconds)  # a slow read: the worker waits, the CPU idles
        return torch.full((4,), float(index)), index % 2


def _check_recommendation(report) -> None:
    best = max(r.samples_per_s for r in report.rows)
    assert report.recommended.samples_per_s >= 0.9 * best
    assert report.recommended_num_workers in [r.num_workers for r in report.rows]


def test_slow_getitem_is_pipeline_bound() -> None:
    report = profile_loader(Items(0.002), batch_size=8, num_workers=[0, 1, 2], batches=6, warmup=1,
                            step=lambda batch: time.sleep(0.001))
    assert report.bottleneck == "pipeline"
    assert "input pipeline is the bottleneck" in report.advice
    assert "Fix the preprocessing rather than adding workers" in report.advice  # sleeping workers
    _check_recommendation(report)
    text = str(report)
    assert "samples/s" in text and "<- recommended" in text


def test_fast_getitem_with_costly_step_is_model_bound() -> None:
    report = profile_loader(Items(0.0), batch_size=8, num_workers=[0, 1], batches=6, warmup=1,
                            step=lambda batch: time.sleep(0.02))
    assert report.bottleneck == "model"
    assert "The model is the bottleneck" in report.advice
    assert report.model_samples_per_s is not None and report.model_samples_per_s < 8 / 0.02
    _check_recommendation(report)
    json.dumps(report.to_dict())


def test_profile_command_runs_end_to_end() -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "data", "profile", "digits", "--batches", "5",
                           "--workers", "0", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["bottleneck"] in ("pipeline", "model") and report["recommended_num_workers"] == 0
    assert report["rows"][0]["samples_per_s"] > 0


def test_import_is_light() -> None:
    code = ("import sys, torchwork.data as d; d.clean_text('x'); "
            "print('torch' in sys.modules, 'sklearn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC}, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


def _row(workers: int, rate: float, cpu: float, busy: float, wait: float = 0.8) -> ProfileRow:
    return ProfileRow(workers, rate, cpu, busy, wait, 1 - wait, 1.0, 10)


def test_verdict_branches_follow_the_rule() -> None:
    full = _verdict([_row(0, 100, 50, 1.0), _row(1, 180, 95, 1.0), _row(2, 185, 97, 1.0)], 2, 8, None, True)
    assert full.recommended_num_workers == 1  # within 5% of the best: fewer workers
    assert "more workers cannot help" in full.advice
    rising = _verdict([_row(0, 100, 30, 1.0), _row(2, 190, 55, 0.95)], 4, 8, None, True)
    assert "measure num_workers up to 4" in rising.advice
    waiting = _verdict([_row(0, 100, 10, 0.1), _row(2, 190, 15, 0.1)], 4, 8, None, True)
    assert "rather than adding workers" in waiting.advice
    model = _verdict([_row(0, 100, 50, 0.2, wait=0.1)], 2, 8, 120.0, True)
    assert model.bottleneck == "model"
