"""The sentiment recipe's ``report.html``: curves, confusion matrix, per-class F1 against the baseline,
latency / throughput / size per artifact variant, the manifest and the guard's findings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchwork.report.html import Report
from torchwork.report.plots import confusion_png, curves_png, grouped_bars_png


def write_report(path: Path, *, history: list[dict[str, Any]], metrics: dict[str, Any], baseline: dict[str, Any],
                 verification: dict[str, Any] | None, artifact: Path, run_path: Path, summary: dict[str, Any],
                 guard: Any = None, cleaning: Any = None) -> Path:
    report = Report("Sentiment analysis of airline tweets: torchwork quickstart")
    better = metrics["macro_f1"] >= baseline["macro_f1"]
    report.paragraph(f"Test macro-F1 {metrics['macro_f1']:.4f} against the TF-IDF baseline's "
                     f"{baseline['macro_f1']:.4f}: " + ("the model wins." if better else "the baseline wins."),
                     "good" if better else "bad")
    report.table("Test split", ["", "accuracy", "macro-F1", "weighted F1"],
                 [["model", metrics["accuracy"], metrics["macro_f1"], metrics["weighted_f1"]],
                  ["TF-IDF + logistic regression", baseline["accuracy"], baseline["macro_f1"],
                   baseline["weighted_f1"]]])

    report.heading("Training curves")
    report.image(curves_png(history, ["train_loss", "val_loss"], "loss"), "loss curves")
    report.image(curves_png(history, ["val_macro_f1"], "validation macro-F1"), "validation macro-F1")

    report.heading("Per-class results")
    classes = metrics["classes"]
    report.image(grouped_bars_png(classes, {
        "model": [metrics["per_class"][c]["f1"] for c in classes],
        "baseline": [baseline["per_class"][c]["f1"] for c in classes]}, "F1 on the test split"),
        "per-class F1 against the baseline")
    report.table(None, ["class", "precision", "recall", "F1", "baseline F1", "support"],
                 [[c, metrics["per_class"][c]["precision"], metrics["per_class"][c]["recall"],
                   metrics["per_class"][c]["f1"], baseline["per_class"][c]["f1"], metrics["per_class"][c]["support"]]
                  for c in classes])
    report.image(confusion_png(metrics["confusion_matrix"], classes), "confusion matrix")

    if verification:
        report.heading("Artifact variants (test split)")
        report.paragraph("Latency at batch 1 and throughput at batch 64 are ratios to the reference, measured "
                         "interleaved in one process (spread: the interquartile range of the rounds, as a share "
                         "of the median); * marks the variant to deploy, and the last column says why.", "note")
        rows = []
        for name, row in verification["variants"].items():
            rows.append([name + (" *" if name == verification.get("deploy") else ""), row.get("kind", ""),
                         _get(row, "accuracy"), _get(row, "top1_agreement"), _get(row, "max_abs"),
                         _get(row, "latency_b1_ms"), _get(row, "latency_ratio"), _get(row, "throughput_b64_per_s"),
                         _get(row, "throughput_ratio"), _get(row, "throughput_spread"), _size(row.get("bytes")),
                         row.get("choice", "")])
        report.table(None, ["variant", "kind", "accuracy", "top-1 agreement", "max abs diff", "latency b1 (ms)",
                            "latency (x)", "throughput b64 (/s)", "throughput (x)", "spread", "size", "choice"],
                     rows)
        report.paragraph(f"Artifact: {artifact}. Serve it with: torchwork serve {artifact}")

    report.heading("Guard findings during training")
    findings = list(getattr(guard, "findings", []) or [])
    if findings:
        report.table(None, ["check", "severity", "message", "fix"],
                     [[f.id, f.severity, f.message, f.fix] for f in findings])
    else:
        report.paragraph("The doctor's guard checks (non-finite loss, exploding gradients, BatchNorm on one "
                         "sample, modes) found nothing.")
    if cleaning is not None:
        report.heading("Data cleaning")
        report.code(str(cleaning))
    report.heading("Summary")
    report.code(summary)
    report.heading("Run manifest")
    manifest_path = run_path / "manifest.json"
    report.code(json.loads(manifest_path.read_text()) if manifest_path.exists() else {})
    return report.write(path)


def _get(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    return "-" if value is None else value


def _size(size: Any) -> str:
    if not isinstance(size, (int, float)):
        return "-"
    return f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"
