"""What ``torchwork fit PHOTOS/`` writes and shows after training: ``summary.json``'s contents, ``report.html``
(the data report, both models with their intervals, per-class precision and recall, the confusion matrix,
the worst test images as thumbnails, the export's verification and the deploy choice), and a real request to
the served artifact.

Example:
    >>> import numpy as np
    >>> png = thumbnail_png(np.zeros((8, 8, 3), dtype=np.uint8), scale=2)
    >>> png[:4], len(png) < 200
    (b'\\x89PNG', True)
"""

from __future__ import annotations

import base64
import dataclasses
import io
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.recipes.serve_demo import serve_command


def thumbnail_png(image: np.ndarray, scale: int = 1, side: int = 64) -> bytes:
    """A small PNG of a ``(h, w, 3)`` uint8 image: at most ``side`` pixels a side, or ``scale`` times as large."""
    from PIL import Image

    picture = Image.fromarray(image)
    if scale > 1:
        picture = picture.resize((image.shape[1] * scale, image.shape[0] * scale), Image.Resampling.NEAREST)
    picture.thumbnail((max(side, image.shape[1] * scale), max(side, image.shape[0] * scale)))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def worst_examples(served: dict[str, Any], data: Any, count: int) -> list[dict[str, Any]]:
    """The ``count`` test images the served model gives the highest loss: row, true and predicted class and
    the probability of the true class."""
    test = data.splits["test"]
    probabilities = served["probabilities"]
    true_p = probabilities[np.arange(len(test.labels)), test.labels]
    order = np.argsort(true_p, kind="stable")[:count]  # the lowest p(true): the highest loss
    return [{"index": int(i), "row": test.rows[i], "true": data.classes[int(test.labels[i])],
             "predicted": data.classes[int(probabilities[i].argmax())], "p_true": round(float(true_p[i]), 4)}
            for i in order]


def _scores(trained: dict[str, Any] | None) -> dict[str, Any] | None:
    if trained is None:
        return None
    metrics = trained["metrics"]
    return {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"], "training_seconds": trained["seconds"],
            "per_class": metrics["per_class"]}


def summary_of(config: Any, data: Any, baseline: dict[str, Any], finetuned: dict[str, Any] | None,
               served: dict[str, Any], exported: dict[str, Any], run_path: Path, seconds: float) -> dict[str, Any]:
    """``summary.json``: the data, both models' test scores, the choice and why, the artifact."""
    comparison = served["against_baseline"]
    return {
        "data": {"folder": str(data.folder), "classes": data.classes, "image_size": data.size,
                 "splits": {name: len(split.labels) for name, split in data.splits.items()},
                 "report_counts": data.report.counts(), "fingerprint": data.report.source.get("fingerprint")},
        "models": {"cnn": _scores(baseline), "efficientnet_lite0": _scores(finetuned)},
        "served": served["name"], "against_baseline": comparison,
        "test": {"accuracy": served["metrics"]["accuracy"], "macro_f1": served["metrics"]["macro_f1"],
                 "macro_f1_interval": [comparison["a"]["low"], comparison["a"]["high"]]},
        "deploy_variant": exported["deploy"], "deploy_choices": exported["choices"],
        "artifact": str(exported["artifact"]), "report": str(run_path / "report.html"),
        "serve_command": serve_command(exported["artifact"]), "config": dataclasses.asdict(config),
        "seconds": round(seconds, 1)}


def _model_rows(baseline: dict[str, Any], finetuned: dict[str, Any] | None, served: dict[str, Any]) -> list[list[Any]]:
    comparison = served["against_baseline"]
    rows = [["CNN from scratch (baseline)", baseline["metrics"]["accuracy"], comparison["b"]["macro_f1"],
             f"{comparison['b']['low']:.4f} to {comparison['b']['high']:.4f}", baseline["seconds"]]]
    if finetuned is not None:
        rows.append(["EfficientNet-Lite0, frozen backbone", finetuned["metrics"]["accuracy"],
                     comparison["a"]["macro_f1"], f"{comparison['a']['low']:.4f} to {comparison['a']['high']:.4f}",
                     finetuned["seconds"]])
    return rows


def write_image_report(path: Path, data: Any, baseline: dict[str, Any], finetuned: dict[str, Any] | None,
                       served: dict[str, Any], exported: dict[str, Any], summary: dict[str, Any]) -> None:
    from torchwork.recipes.sentiment_report_parts import data_sections
    from torchwork.report.html import Report
    from torchwork.report.plots import confusion_png

    html = Report(f"torchwork fit {data.folder}")
    data_sections(html, None, data.report.to_dict())
    html.table("Splits (near copies grouped, never in two splits)", ["split", "images", "classes"],
               [[name, split["rows"], ", ".join(f"{c} {n}" for c, n in split["classes"].items())]
                for name, split in data.report.splits.items()])
    html.table("Test split: both models (95% bootstrap intervals)",
               ["model", "accuracy", "macro-F1", "macro-F1 interval", "training s"],
               _model_rows(baseline, finetuned, served))
    html.paragraph(f"Served: {served['name']}. {served['against_baseline']['reason']}.")
    metrics = served["metrics"]
    html.table(f"Per class ({served['name']}, test split)", ["class", "precision", "recall", "F1", "support"],
               [[name, m["precision"], m["recall"], m["f1"], m["support"]] for name, m in metrics["per_class"].items()])
    html.image(confusion_png(metrics["confusion_matrix"], data.classes), "confusion matrix")
    worst = worst_examples(served, data, int(summary["config"]["worst"]))
    html.heading("The worst test images (highest loss)")
    for example in worst:
        image = data.splits["test"].images[example["index"]]
        caption = (f"{example['row']}: true {example['true']}, predicted {example['predicted']} "
                   f"(p(true) {example['p_true']:.3f})")
        html.image(thumbnail_png(image, scale=2), caption)
        html.paragraph(caption)
    html.heading("Export and the deployed variant")
    html.table(None, ["variant", "why chosen or not"], sorted(exported["choices"].items()))
    html.heading("Summary")
    html.code(summary)
    html.write(path)


def serve_and_show(artifact: Path, data: Any, count: int = 3) -> list[dict[str, Any]]:
    """Serve the artifact, send it ``count`` test images (their files' bytes, base64) and print the answers."""
    from torchwork.data.image_decode import MAX_IMAGE_BYTES
    from torchwork.data.tables_detect import read_regular_file
    from torchwork.recipes.serve_demo import local_server

    rows = data.splits["test"].rows[:count]
    items = [base64.b64encode(read_regular_file(Path(data.folder) / row, MAX_IMAGE_BYTES)).decode("ascii")
             for row in rows]
    with local_server(artifact) as server:
        print(f"serving {artifact} at {server.url}; POST /predict with {len(items)} image(s):", flush=True)
        answers = [{"row": row, **prediction} for row, prediction in zip(rows, server.predict(items))]
    for answer in answers:
        print(f"  {answer['label']:<12} {answer['row']}", flush=True)
    return answers
