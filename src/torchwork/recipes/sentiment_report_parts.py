"""Parts of the sentiment report: the learning-rate curve with the best epoch, the confusion matrix in
counts and normalised by true class, misclassified tweets, per-split rows, the manifest as a table.

Example:
    >>> manifest_rows({"versions": {"torch": "2.13.0"}, "files": {"a.onnx": {"bytes": 10}}, "seed": 0})
    [['versions.torch', '2.13.0'], ['files', '1 file(s): a.onnx'], ['seed', '0']]
    >>> normalised([[3, 1], [0, 0]])
    [[0.75, 0.25], [0.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchwork.report.plots import figure_png, new_figure

MAX_CELL = 160  # characters of one manifest value in the table


def normalised(matrix: Sequence[Sequence[int]]) -> list[list[float]]:
    """Each row divided by its total (the share of each true class predicted as each class)."""
    return [[round(v / sum(row), 4) if sum(row) else 0.0 for v in row] for row in matrix]


def confusion_pair_png(matrix: Sequence[Sequence[int]], classes: Sequence[str]) -> bytes:
    """Counts and row-normalised shares side by side (rows: true class, columns: predicted)."""
    import numpy as np

    fig, axes = new_figure(9.2, 4.0)
    fig.clf()
    for index, (data, title, fmt) in enumerate(((np.asarray(matrix), "counts", "{:d}"),
                                                (np.asarray(normalised(matrix)), "normalised by true class",
                                                 "{:.2f}"))):
        ax = fig.add_subplot(1, 2, index + 1)
        ax.imshow(data, cmap="Blues", vmin=0)
        ax.set_xticks(range(len(classes)), classes, rotation=30)
        ax.set_yticks(range(len(classes)), classes)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(title)
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                ax.text(j, i, fmt.format(data[i, j].item()), ha="center", va="center",
                        color="white" if data[i, j] > data.max() / 2 else "black")
    return figure_png(fig)


def lr_curve_png(lrs: Sequence[float], steps_per_epoch: int, best_step: int | None,
                 val_f1: Sequence[float] = ()) -> bytes:
    """The learning rate at every step, the epochs' validation macro-F1, and the best checkpoint marked."""
    fig, ax = new_figure(7.0, 3.4)
    ax.plot(range(len(lrs)), lrs, label="learning rate (head)", color="tab:blue")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.grid(alpha=0.3)
    if best_step is not None:
        ax.axvline(best_step, color="tab:red", linestyle="--", label=f"best checkpoint (step {best_step})")
    if val_f1:
        right = ax.twinx()
        right.plot([steps_per_epoch * (i + 1) for i in range(len(val_f1))], val_f1, marker="o",
                   color="tab:green", label="validation macro-F1")
        right.set_ylabel("validation macro-F1")
        right.legend(loc="lower right")
    ax.legend(loc="upper right")
    return figure_png(fig)


def misclassified(texts: Sequence[str], labels: Sequence[int], probabilities: Sequence[Sequence[float]],
                  classes: Sequence[str], count: int = 12) -> list[list[Any]]:
    """The ``count`` most confidently wrong test tweets: text, true class, predicted, probabilities."""
    wrong = []
    for text, label, probs in zip(texts, labels, probabilities):
        predicted = max(range(len(probs)), key=lambda i: probs[i])
        if predicted != int(label):
            wrong.append((probs[predicted], text, int(label), predicted, probs))
    wrong.sort(key=lambda row: -row[0])
    return [[text, classes[label], classes[predicted], " ".join(f"{c} {p:.2f}" for c, p in zip(classes, probs))]
            for _, text, label, predicted, probs in wrong[:count]]


def split_rows(splits: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    """One row per split and class (precision, recall, F1, support), then the split's macro row."""
    rows = []
    for split, metrics in splits.items():
        for name in metrics["classes"]:
            cell = metrics["per_class"][name]
            rows.append([split, name, cell["precision"], cell["recall"], cell["f1"], cell["support"]])
        rows.append([split, "all (accuracy / macro-F1)", metrics["accuracy"], "", metrics["macro_f1"],
                     sum(metrics["per_class"][c]["support"] for c in metrics["classes"])])
    return rows


def manifest_rows(manifest: Mapping[str, Any], prefix: str = "") -> list[list[str]]:
    """A run manifest as ``[dotted key, value]`` rows; long lists and file tables summarised."""
    rows: list[list[str]] = []
    for key, value in manifest.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and key == "files":
            rows.append([name, f"{len(value)} file(s): " + ", ".join(sorted(value))[:MAX_CELL]])
        elif isinstance(value, Mapping) and value:
            rows.extend(manifest_rows(value, name + "."))
        elif isinstance(value, (list, tuple)):
            text = ", ".join(str(v) for v in value)
            rows.append([name, text if len(text) <= MAX_CELL else text[:MAX_CELL] + f"... ({len(value)} items)"])
        else:
            text = str(value)
            rows.append([name, text if len(text) <= MAX_CELL else text[:MAX_CELL] + "..."])
    return rows


SEED_FREE = ("seed", "run_dir", "threads")  # settings that may differ between runs of one seed sweep


def seed_rows(run_root: Path, current: Path, settings: Mapping[str, Any],
              models: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The test macro-F1 of each model in every run under ``run_root`` made with the same ``settings`` but
    another seed (read from the runs' ``manifest.json`` and ``summary.json``, as data), this run's included,
    then a ``max - min`` row; [] unless two seeds or more were measured."""
    import json

    from torchwork.runs.folder_files import load_json, read_run_file
    from torchwork.runs.readback import MAX_MANIFEST_BYTES

    def read(folder: Path, name: str) -> Any:
        # a regular file inside the folder, bounded: a FIFO, a link out or a huge file is refused, not read
        return load_json(read_run_file(folder, name, MAX_MANIFEST_BYTES), folder / name)

    def row(seed: Any, scores: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return {"seed": seed, **{f"{name} macro-F1": s.get("macro_f1") for name, s in scores.items()}}

    # as a manifest holds them (tuples become lists)
    same = json.loads(json.dumps({k: v for k, v in settings.items() if k not in SEED_FREE}, default=str))
    rows = {settings.get("seed"): row(settings.get("seed"), models)}
    for folder in sorted(p for p in Path(run_root).iterdir() if p.is_dir() and p != current):
        try:
            config = read(folder, "manifest.json")["config"]
            scores = read(folder, "summary.json")["models"]
        except (OSError, ValueError, KeyError, TypeError):  # ConfigError (refused) is a ValueError
            continue  # not a finished run of this recipe
        if isinstance(config, dict) and isinstance(scores, dict) and config.get("seed") not in rows \
                and all(config.get(k) == v for k, v in same.items()):
            rows[config["seed"]] = row(config["seed"], scores)
    if len(rows) < 2:
        return []
    ordered = sorted(rows.values(), key=lambda r: r["seed"])
    columns = [c for c in ordered[0] if c != "seed" and all(isinstance(r.get(c), float) for r in ordered)]
    spread = {"seed": "max - min", **{c: round(max(r[c] for r in ordered) - min(r[c] for r in ordered), 4)
                                      for c in columns}}
    return [{c: r.get(c) for c in ("seed", *columns)} for r in ordered] + [spread]


def data_sections(report: Any, cleaning: Any, data_report: Mapping[str, Any] | None) -> None:
    """The data report's findings (a user's own file: ``torchwork fit``) and the cleaning's counts."""
    if data_report is not None:
        report.heading("Data report (before training)")
        source = data_report.get("source", {})
        if "bundled" in source:
            report.paragraph(f"The bundled {source['bundled']} as shipped ({source['path']}, {source['rows']:,} "
                             "rows), dirty on purpose: the cleaning step below repairs what it can. Label noise: "
                             f"{source['label_noise']}.", "note")
        report.table(None, ["severity", "kind", "count", "what", "first rows", "fix"],
                     [[f["severity"], f["kind"], f["count"], f["summary"],
                       ", ".join(str(e.get("row", "")) for e in f["examples"] if "row" in e), f["fix"]]
                      for f in data_report["findings"]])
    if cleaning is not None:
        report.heading("Data cleaning")
        report.code(str(cleaning))


def guard_section(report: Any, guard: Any) -> None:
    """What the doctor's guard found during training, or that it found nothing."""
    report.heading("Guard findings during training")
    findings = list(getattr(guard, "findings", []) or [])
    if findings:
        report.table(None, ["check", "severity", "message", "fix"],
                     [[f.id, f.severity, f.message, f.fix] for f in findings])
    else:
        report.paragraph("The doctor's guard checks (non-finite loss, exploding gradients, BatchNorm on one "
                         "sample, modes) found nothing.")
