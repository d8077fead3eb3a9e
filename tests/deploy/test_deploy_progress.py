"""Long exports say what they do: a line when a stage starts (which variant, which batch size) and again
at least every 10 s while it runs (rows or rounds done), so no minute of an export is silent."""

from __future__ import annotations

import re
import time

from deploy_helpers import digits, digits_mlp, one_thread

from torchwork.deploy import export
from torchwork.deploy.progress import EVERY_S, rows, showing_progress, stage


def test_the_export_says_each_variant_batch_and_rows_at_least_every_10_s(tmp_path) -> None:
    lines: list[tuple[float, str]] = []
    data = digits()
    x_test = data["x_test"].repeat(8, 1)  # 2,880 real rows: parity and timing long enough to report
    started = time.monotonic()
    with one_thread(), showing_progress("export", write=lambda line: lines.append((time.monotonic(), line))):
        export(digits_mlp(), data["x_train"][:8], tmp_path / "digits", formats=("onnx",), samples=x_test,
               targets=data["y_test"].repeat(8), quantize="int8", calibration=data["x_train"][:256],
               verify_rounds=5, threads=1)
    ended = time.monotonic()
    text = [line for _, line in lines]
    assert any(re.search(r"exporting .*: onnx", line) for line in text), text
    assert any("quantizing" in line and "onnx-int8" in line for line in text), text
    assert any(re.search(r"parity .*: onnx-int8 at batch 256, [\d,]+/2,880 rows", line) for line in text), text
    assert any(re.search(r"timing .*at batch 64, \d/5 rounds", line) for line in text), text
    times = [started, *(t for t, _ in lines), ended]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) <= 10.0, (max(gaps), text)


def test_the_heartbeat_repeats_the_current_stage_while_a_call_cannot_report() -> None:
    lines: list[str] = []
    with showing_progress("export", every_s=0.2, write=lines.append):
        stage("quantizing", variant="onnx-int8", total=4, unit="batches")
        rows(1)
        time.sleep(0.7)  # one long call that reports nothing
    assert lines[0].startswith("export: quantizing: onnx-int8, 0/4 batches")
    assert len(lines) >= 3 and all(line.startswith("export: quantizing: onnx-int8, 1/4 batches") for line in lines[1:])
    assert EVERY_S <= 10


def test_every_count_belongs_to_the_stage_it_is_shown_with(tmp_path, monkeypatch) -> None:
    """Each pass over rows says its own stage first: the verification's reference run once showed its
    1,792 held-out rows as "1,792/114 batches" of the fallback margin's stage before it, and the calibration
    passes ran through their rows under "quantizing" at 0 of them."""
    from torchwork.deploy import progress

    seen: list[tuple[str, int, int | None]] = []
    report_rows = progress.rows

    def rows_checked(done: int) -> None:
        state = progress._active[0].state if progress._active else {}
        seen.append((state.get("stage", ""), done, state.get("total")))
        report_rows(done)

    monkeypatch.setattr(progress, "rows", rows_checked)
    data = digits()
    with one_thread(), showing_progress("export", every_s=60, write=lambda line: None):
        export(digits_mlp(), data["x_train"][:8], tmp_path / "digits", formats=("onnx",), samples=data["x_test"],
               targets=data["y_test"], quantize="int8", calibration=data["x_train"][:256],
               quantize_smoothing=0.5, quantize_activations="static", quantize_fallback_agreement=0.99, softmax=True,
               verify_rounds=3, threads=1)
    stages = {stage for stage, _, _ in seen}
    # one float pass over the 4 calibration batches serves smoothing, the static scales and the margin's float
    # side; the margin then runs the INT8 graph alone over them
    calibrating = [done for stage, done, _ in seen if stage.startswith("calibration")]
    assert calibrating == [1, 2, 3, 4], seen
    assert not any(stage.startswith(("smoothing", "static INT8 scales")) for stage in stages), stages
    assert [done for stage, done, _ in seen if "fallback" in stage] == [1, 2, 3, 4], seen
    beyond = [(stage, done, total) for stage, done, total in seen if total is not None and done > total]
    assert not beyond, beyond
