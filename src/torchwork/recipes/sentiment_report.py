"""The sentiment recipe's ``report.html``: a header (model, device, precision, training time, data sizes),
the three models side by side, rows per split and class, curves and the learning rate with the best epoch,
the confusion matrix in counts and normalised, per-class F1 against the baseline, misclassified tweets,
latency / throughput / size per artifact variant, the guard's findings and the manifest as a table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchwork.recipes.serve_demo import serve_command
from torchwork.report.html import Report
from torchwork.report.plots import curves_png, grouped_bars_png


def write_report(path: Path, *, history: list[dict[str, Any]], metrics: dict[str, Any], baseline: dict[str, Any],
                 verification: dict[str, Any] | None, artifact: Path, run_path: Path, summary: dict[str, Any],
                 guard: Any = None, cleaning: Any = None, served: dict[str, Any] | None = None,
                 sizes: dict[str, int] | None = None, test_texts: list[str] | None = None,
                 seeds: list[dict[str, Any]] | None = None, data_report: dict[str, Any] | None = None) -> Path:
    from torchwork.recipes import sentiment_report_parts as parts

    served = served or {}
    own_file = (data_report or {}).get("source", {}).get("data", {}).get("path")  # None: the bundled tweets
    report = Report(f"{own_file}: torchwork fit" if own_file else
                    "Sentiment analysis of airline tweets: torchwork quickstart")
    data = ", ".join(f"{n} {v:,}" for n, v in (sizes or {}).items())
    report.paragraph(f"Served model: {served.get('name', 'ngram')}; device {served.get('device') or 'cpu'}; "
                     f"precision {summary.get('precision')}; training {summary.get('training_seconds')} s "
                     f"(whole run {summary.get('seconds')} s); data: {data or '-'} tweets."
                     + (f" Training strategy: {served['strategy']}." if served.get("strategy") else ""), "note")
    against = served.get("against_baseline")
    better = against["beats"] if against else metrics["macro_f1"] >= baseline["macro_f1"]
    report.paragraph(f"{against['reason']}." if against else f"Test macro-F1 {metrics['macro_f1']:.4f} against the "
                     f"TF-IDF baseline's {baseline['macro_f1']:.4f}: "
                     + ("the model wins." if better else "the baseline wins."), "good" if better else "bad")
    report.table("Test split", ["", "accuracy", "macro-F1", "weighted F1"],
                 [["model", metrics["accuracy"], metrics["macro_f1"], metrics["weighted_f1"]],
                  ["TF-IDF + logistic regression", baseline["accuracy"], baseline["macro_f1"],
                   baseline["weighted_f1"]]])

    models = summary.get("models") or {}
    if models:
        report.table("The models side by side (test split)", ["model", "accuracy", "macro-F1", "training (s)"],
                     [[n, m["accuracy"], m["macro_f1"], m["training_seconds"]] for n, m in models.items()])
    report.table("Served model: rows per split and class", ["split", "class", "precision", "recall", "F1", "support"],
                 parts.split_rows(served.get("splits") or {"test": metrics}))
    if seeds:  # parts.seed_rows: the same settings with other seeds in this run folder's parent
        report.table("Spread over seeds (measured: the runs beside this one with the same settings)",
                     list(seeds[0]), [list(r.values()) for r in seeds])

    report.heading("Training curves")
    report.image(curves_png(history, ["train_loss", "val_loss"], "loss"), "loss curves")
    report.image(curves_png(history, ["val_macro_f1"], "validation macro-F1"), "validation macro-F1")
    best = served.get("best") or {}
    if served.get("lr_steps"):
        steps_per_epoch = max(1, round(len(served["lr_steps"]) / max(1, len(history))))
        report.image(parts.lr_curve_png(served["lr_steps"], steps_per_epoch, best.get("step"),
                                        [h.get("val_macro_f1") for h in history]), "learning rate and best epoch")
        report.paragraph(f"Best checkpoint: validation macro-F1 {best.get('value', 0):.4f} after epoch "
                         f"{best.get('epoch')} (step {best.get('step')}); warm-up then linear decay.", "note")

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
    report.paragraph("Confusion matrix on the test split: counts (left) and normalised by true class (right: the "
                     "share of each true class given each prediction, so that the rare class reads as clearly).",
                     "note")
    report.image(parts.confusion_pair_png(metrics["confusion_matrix"], classes), "confusion matrix, counts and "
                 "normalised")
    if served.get("test_probabilities") is not None and test_texts is not None:
        labels = [classes.index(c) if isinstance(c, str) else int(c) for c in served.get("test_labels", [])] or None
        if labels:
            report.table("A dozen misclassified test tweets (the most confident mistakes)",
                         ["tweet", "true", "predicted", "probabilities"],
                         parts.misclassified(test_texts, labels, served["test_probabilities"], classes))

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
        report.paragraph(f"Artifact: {artifact}. Serve it with: {serve_command(artifact)}")

    if summary.get("time_budget"):  # torchwork fit --time-budget
        from torchwork.recipes.fit_budget import budget_section

        budget_section(report, summary["time_budget"])
    parts.guard_section(report, guard)
    parts.data_sections(report, cleaning, data_report)
    report.heading("Summary")
    report.code(summary)
    report.heading("Run manifest")
    manifest = _own_manifest(run_path)
    report.table(None, ["entry", "value"], parts.manifest_rows(manifest))
    return report.write(path)


def _own_manifest(run_path: Path) -> Any:
    """The run's ``manifest.json`` ({} when there is none), read bounded as a regular file of the run (a FIFO
    or a link out of it is a ConfigError naming it, not a hang)."""
    from torchwork.runs.folder_files import load_json, read_run_file
    from torchwork.runs.readback import MAX_MANIFEST_BYTES

    try:
        data = read_run_file(run_path, "manifest.json", MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return {}
    return load_json(data, run_path / "manifest.json")


def _get(row: dict[str, Any], key: str) -> Any:
    value = row.get(key)
    return "-" if value is None else value


def _size(size: Any) -> str:
    if not isinstance(size, (int, float)):
        return "-"
    return f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"
