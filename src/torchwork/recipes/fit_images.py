"""``torchwork fit PHOTOS/``: an image folder (one sub-folder per class, optionally below train/ val/ test/)
to a served, verified model, the same path as a text file takes:

1. the data report first (:mod:`torchwork.recipes.image_data`): errors stop the run before anything is
   written; corrupt files (decompression bombs included) are listed and left out; splits are planned with
   near copies grouped, so that none straddles two splits;
2. the baseline: a small CNN from scratch (:class:`~torchwork.recipes.image_models.ImageCNN`);
3. EfficientNet-Lite0 fine-tuned: its ImageNet backbone frozen and run once over each split (cached
   features), its head trained on the cache;
4. both evaluated on the test split: macro-F1 with a 95% bootstrap interval, per-class precision and
   recall, the confusion matrix; the fine-tuned model is served only if it beats the baseline beyond the
   noise (the paired interval of the difference lies above 0), else the CNN is, and the run says why;
5. export with the image preprocessing bundled (encoded image bytes in, :mod:`torchwork.data.image_decode`),
   float ONNX and Conv+MatMul INT8, each verified on the test images; INT8 is deployed only where it is
   measured faster without losing accuracy (:mod:`torchwork.deploy.choice`), and the run says which;
6. ``report.html`` (with the worst test images as thumbnails), ``summary.json``, and the line that serves it.

Example (a real run takes minutes; the settings are checked at once):
    >>> ImageFitConfig(data="photos", image_size=16).validate()
    Traceback (most recent call last):
      ...
    torchwork.errors.ConfigError: image_size=16: must be >= 32.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path
from typing import Any

from torchwork.recipes.config import (
    EXPORT_FORMATS,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_LR,
    MAX_VERIFY_ROUNDS,
    check_quantize_formats,
    check_settings,
)
from torchwork.recipes.serve_demo import serve_command
from torchwork.threads import MAX_THREADS

# Past these the decoded splits (uint8, image_size**2 * 3 bytes an image, held in memory) and the networks'
# activations outgrow any memory: 1,024 pixels a side is 3 MB an image; the fashion recipe's bounds.
MAX_IMAGE_SIZE, MAX_CHANNELS = 1024, 1024
MAX_WORST = 1000  # thumbnails in report.html


@dataclasses.dataclass
class ImageFitConfig:
    data: str = ""  # the image folder
    seed: int = 0
    run_dir: str = "runs/fit"
    image_size: int = 64  # every image is resized to this (EfficientNet's input; the CNN resizes again)
    cnn_size: int = 32
    channels: int = 32
    epochs: int = 4
    batch_size: int = 128
    lr: float = 3e-3
    patience: int = 2
    pretrained: bool = True  # also fine-tune EfficientNet-Lite0 (frozen backbone, cached features)
    pretrained_epochs: int = 8
    pretrained_lr: float = 2e-3
    quantize: bool = True  # export Conv+MatMul INT8 beside float; deployed only where measured faster
    export_formats: tuple[str, ...] = ("onnx",)
    verify_rounds: int = 20
    threads: int = 0
    worst: int = 12  # the test images with the highest loss shown in the report

    def validate(self) -> None:
        check_settings(self, at_least={"image_size": 32, "cnn_size": 8, "channels": 1, "epochs": 1,
                                       "batch_size": 1, "patience": 0, "pretrained_epochs": 1, "verify_rounds": 5,
                                       "threads": 0, "seed": 0, "worst": 0},
                       above={"lr": 0, "pretrained_lr": 0}, some_of={"export_formats": EXPORT_FORMATS},
                       at_most={"lr": MAX_LR, "pretrained_lr": MAX_LR, "epochs": MAX_EPOCHS,
                                "pretrained_epochs": MAX_EPOCHS, "patience": MAX_EPOCHS,
                                "batch_size": MAX_BATCH_SIZE, "threads": MAX_THREADS,
                                "verify_rounds": MAX_VERIFY_ROUNDS, "image_size": MAX_IMAGE_SIZE,
                                "cnn_size": MAX_IMAGE_SIZE, "channels": MAX_CHANNELS, "worst": MAX_WORST})
        check_quantize_formats(self)


QUICK = ["epochs=1", "pretrained_epochs=2", "verify_rounds=5"]


def say(text: str = "") -> None:
    print(text, flush=True)


def _probabilities(trainer: Any, dataset: Any) -> Any:
    from torchwork.data import loader

    return trainer.predict(loader(dataset, 512, num_workers=0)).softmax(dim=-1).numpy()


def _data_record(data: Any) -> dict[str, Any]:
    """What a run's manifest records of the image folder (its fingerprint, the report's counts), as a text
    fit records its file: ``torchwork runs diff`` shows a changed folder as a data change, and a resume
    refuses one (:mod:`torchwork.recipes.resumed_data`)."""
    return {"data_source": data.report.source, "data_report_counts": data.report.counts()}


def _fit(model: Any, params: Any, lr: float, train: Any, validation: Any, epochs: int, run_dir: str,
         config: ImageFitConfig, patience: int, record: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """Train ``model`` with the Trainer (early stopping on validation accuracy); the trainer at its best
    checkpoint, and the history. ``record``: what the manifest keeps beside the settings."""
    import torch
    from torch import nn

    from torchwork import EarlyStopping, Trainer
    from torchwork.data import loader
    from torchwork.engine.metrics import accuracy, macro_f1

    trainer = Trainer(model, torch.optim.AdamW(params, lr=lr), nn.CrossEntropyLoss(), device="cpu",
                      threads=config.threads or "auto", metrics={"accuracy": accuracy},
                      epoch_metrics={"macro_f1": macro_f1},
                      early_stopping=EarlyStopping("val_accuracy", mode="max", patience=patience),
                      run_dir=run_dir, tensorboard=False, config={**dataclasses.asdict(config), **record})
    history = trainer.fit(loader(train, config.batch_size, shuffle=True, seed=config.seed, num_workers=0),
                          loader(validation, 512, num_workers=0), epochs=epochs)
    assert trainer.run_path is not None  # run_dir is given: the Trainer made a run folder
    best = torch.load(trainer.run_path / "checkpoints" / "best.pt", weights_only=True)["model"]
    model.load_state_dict(best)
    return trainer, history


def train_baseline(config: ImageFitConfig, data: Any) -> dict[str, Any]:
    """The small CNN from scratch: its model, run folder, history and test probabilities."""
    from torchwork import seed_everything
    from torchwork.recipes.image_models import ImageCNN

    say("\n== 2. Baseline: a small CNN from scratch")
    seed_everything(config.seed)
    model = ImageCNN(len(data.classes), channels=config.channels, input_size=config.cnn_size)
    started = time.perf_counter()
    trainer, history = _fit(model, model.parameters(), config.lr, data.splits["train"].dataset(),
                            data.splits["validation"].dataset(), config.epochs, config.run_dir, config,
                            config.patience, _data_record(data))
    probabilities = _probabilities(trainer, data.splits["test"].dataset())
    return {"name": "cnn", "model": model.eval(), "run_path": trainer.run_path, "history": history,
            "probabilities": probabilities, "seconds": round(time.perf_counter() - started, 1)}


def train_finetuned(config: ImageFitConfig, data: Any, run_path: Path) -> dict[str, Any]:
    """EfficientNet-Lite0: the frozen backbone's outputs cached once per split, the head trained on them."""
    from torchwork import seed_everything
    from torchwork.finetune import cache_features, param_groups
    from torchwork.recipes.image_models import FineTuned, lite0_parts

    say("\n== 3. EfficientNet-Lite0 (ImageNet weights), frozen backbone, cached features, head trained")
    seed_everything(config.seed)
    backbone, head, report = lite0_parts(len(data.classes), config.image_size)
    say(report.table())
    started = time.perf_counter()
    caches = {name: cache_features(backbone, split.dataset(), batch_size=256, desc=f"caching {name} features")
              for name, split in data.splits.items()}
    cache_seconds = time.perf_counter() - started
    say(f"cached the frozen backbone's outputs once ({', '.join(f'{n} {len(c)}' for n, c in caches.items())} "
        f"images) in {cache_seconds:.1f} s")
    trainer, history = _fit(head, param_groups(head, lr=config.pretrained_lr, head="fc", weight_decay=0.01),
                            config.pretrained_lr, caches["train"], caches["validation"], config.pretrained_epochs,
                            str(run_path / "pretrained"), config, config.patience + 1, _data_record(data))
    probabilities = _probabilities(trainer, caches["test"])
    return {"name": "efficientnet-lite0", "model": FineTuned(backbone, head).eval(), "history": history,
            "probabilities": probabilities, "seconds": round(time.perf_counter() - started, 1),
            "cache_seconds": round(cache_seconds, 1), "load_report": report.summary()}


def evaluate(name: str, trained: dict[str, Any], data: Any) -> dict[str, Any]:
    from torchwork.data import classification_metrics, format_metrics

    labels = data.splits["test"].labels
    metrics = classification_metrics(labels, trained["probabilities"].argmax(axis=-1), data.classes)
    say(f"\n{name} on the test split ({len(labels):,} images):")
    say(format_metrics(metrics))
    trained["metrics"] = metrics
    return metrics


def choose(baseline: dict[str, Any], finetuned: dict[str, Any] | None, data: Any, seed: int) -> dict[str, Any]:
    """The model to serve: the fine-tuned one if it beats the CNN beyond the test split's noise, else the CNN;
    ``against_baseline`` says why, either way."""
    from torchwork.recipes.fit_choice import against_baseline

    labels, classes = data.splits["test"].labels, data.classes
    base_predictions = baseline["probabilities"].argmax(axis=-1)
    if finetuned is None:
        comparison = against_baseline(baseline["probabilities"], base_predictions, labels, classes, seed)
        comparison["reason"] = "only the CNN was trained (pretrained=false): it is served"
        return {**baseline, "against_baseline": comparison}
    comparison = against_baseline(finetuned["probabilities"], base_predictions, labels, classes, seed)
    difference = comparison["difference"]
    verdict = (f"EfficientNet-Lite0's test macro-F1 {comparison['a']['macro_f1']:.4f} against the CNN's "
               f"{comparison['b']['macro_f1']:.4f}: {difference['value']:+.4f} (95% interval "
               f"{difference['low']:+.4f} to {difference['high']:+.4f})")
    if comparison["beats"]:
        comparison["reason"] = f"{verdict}: beyond the noise, so the fine-tuned model is served"
        served = finetuned
    else:
        comparison["reason"] = (f"{verdict}: not beyond the noise, so the fine-tuned model is NOT served; the "
                                "CNN baseline is served instead")
        served = baseline
    say(comparison["reason"])
    return {**served, "against_baseline": comparison}


def export_served(config: ImageFitConfig, served: dict[str, Any], data: Any, run_path: Path) -> dict[str, Any]:
    """The artifact: the served model with its image preprocessing, float ONNX and (measured) INT8."""
    import torch

    from torchwork.data.image_decode import ImagePreprocessor
    from torchwork.deploy import export, format_report
    from torchwork.recipes.sentiment_shared import export_threads

    say("\n== 5. Export: image bytes in, float ONNX and Conv+MatMul INT8, verified on the test images")
    export_threads(config.threads, say)
    preprocessor = ImagePreprocessor(config.image_size)
    test = data.splits["test"]
    samples = torch.from_numpy(test.images)
    with warnings.catch_warnings():  # a refused INT8 variant is said below, with its reason
        warnings.simplefilter("ignore", UserWarning)
        report = export(served["model"], preprocessor(samples[:8]), run_path / "artifact",
                        formats=config.export_formats, preprocess=preprocessor, labels=list(data.classes),
                        softmax=True, samples=samples, targets=[int(y) for y in test.labels], overwrite=True,
                        verify_rounds=config.verify_rounds, strict=False,
                        quantize="int8" if config.quantize else None, quantize_ops=("Conv", "MatMul"))
    say(format_report(report["verify"]))
    reasons = {name: row["choice"] for name, row in report["verify"]["variants"].items() if row.get("choice")}
    reasons.update({name: f"refused: {reason}" for name, reason in report["refused"].items()})
    say(f"deployed variant: {report['deploy']} ({reasons.get(report['deploy'], 'the only one verified')})")
    if config.quantize and report["deploy"] != "onnx-int8":
        say("INT8 (Conv+MatMul) is not deployed: " + reasons.get("onnx-int8", "not written"))
    return {"artifact": run_path / "artifact", "report": report, "deploy": report["deploy"], "choices": reasons}


def run(config: ImageFitConfig, serve: bool = False) -> dict[str, Any]:
    """Every step of the module, in order; the summary (also ``summary.json`` in the run folder)."""
    from torchwork.files import write_json
    from torchwork.recipes.image_data import load_image_folder
    from torchwork.recipes.image_report import summary_of, write_image_report
    from torchwork.recipes.resumed_data import check_resumed_source

    config.validate()
    started = time.perf_counter()
    say(f"== 1. Data: the image folder {config.data}")
    data = load_image_folder(config.data, size=config.image_size, seed=config.seed, say=say)
    check_resumed_source(data.report.source)
    baseline = train_baseline(config, data)
    run_path = baseline["run_path"]
    write_json(run_path / "data_report.json", data.report.to_dict())
    evaluate("the CNN baseline", baseline, data)
    finetuned = train_finetuned(config, data, run_path) if config.pretrained else None
    if finetuned is not None:
        evaluate("EfficientNet-Lite0, fine-tuned", finetuned, data)
    say("\n== 4. The model to serve")
    served = choose(baseline, finetuned, data, config.seed)
    exported = export_served(config, served, data, run_path)
    summary = summary_of(config, data, baseline, finetuned, served, exported, run_path,
                         time.perf_counter() - started)
    write_image_report(run_path / "report.html", data, baseline, finetuned, served, exported, summary)
    write_json(run_path / "summary.json", summary)
    say(f"\nreport:   {run_path / 'report.html'}")
    say(f"serve it: {serve_command(exported['artifact'])}")
    if serve:
        from torchwork.recipes.image_report import serve_and_show

        summary["served_answers"] = serve_and_show(exported["artifact"], data)
    return summary
