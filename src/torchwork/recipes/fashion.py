"""Fashion-MNIST: a CNN whose depth adapts to the input resolution, exported without silent errors.

Features, top to bottom:
1. data: Fashion-MNIST from Debian's ``dataset-fashion-mnist`` (60k train / 10k test);
2. model: :class:`~torchwork.recipes.models.AdaptiveDepthCNN`, whose ``forward`` loops over downsampling
   blocks until the image is small (Python control flow on the input's shape, the handbook's example);
3. training with the Trainer: seeded, run folder, early stopping on validation accuracy;
4. export: every exporter is tried on *resolution*, not only batch size. ``torch.jit.trace`` records the
   depth of the example and silently runs it at every resolution; ``torch.export`` with a dynamic
   resolution refuses, naming the shape-dependent branch. The artifact is exported for the training
   resolution with a dynamic batch, where every format matches eager, and refuses other sizes by schema;
5. ``report.html`` and ``summary.json`` in the run folder.

Run it: ``torchwork quickstart --recipe fashion``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from torchwork.recipes.config import EXPORT_FORMATS, check_settings


@dataclasses.dataclass
class FashionConfig:
    seed: int = 0
    run_dir: str = "runs/fashion"
    subset: int = 0  # keep only this many training rows (0: all)
    epochs: int = 2
    batch_size: int = 128
    lr: float = 3e-3
    channels: int = 32
    patience: int = 2
    export_formats: tuple[str, ...] = ("pt2", "onnx")
    threads: int = 0

    def validate(self) -> None:
        check_settings(self, at_least={"epochs": 1, "batch_size": 1, "channels": 1, "patience": 0, "threads": 0,
                                       "seed": 0},
                       above={"lr": 0}, some_of={"export_formats": EXPORT_FORMATS},
                       zero_or_at_least={"subset": (100, "ten images of each of the ten classes")})


def say(text: str = "") -> None:
    print(text, flush=True)


def resolution_check(model: Any, train_size: int = 28, other_size: int = 56) -> dict[str, str]:
    """What each exporter does with a resolution other than the example's (eager is the truth)."""
    import warnings

    import torch

    model = model.eval()
    example = torch.rand(2, 1, train_size, train_size)
    other = torch.rand(2, 1, other_size, other_size)
    with torch.inference_mode():
        expected = model(other)
    verdicts: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, example)
    with torch.inference_mode():
        got = traced(other)
    same = got.shape == expected.shape and torch.allclose(got, expected, atol=1e-4)
    verdicts["torchscript-trace"] = (
        "matches eager at other resolutions" if same else
        f"REFUSED: traced at {train_size}x{train_size}, it runs the recorded depth at {other_size}x{other_size} "
        f"without any warning (max difference {float((got - expected).abs().max()):.3g})")
    size = torch.export.Dim("size", min=8, max=112)
    try:
        torch.export.export(model, (example,), dynamic_shapes={"images": {2: size, 3: size}})
        verdicts["pt2-dynamic-resolution"] = "exported with a dynamic resolution"
    except Exception as error:  # torch raises several types for constraint violations
        reason = str(error).strip().splitlines()[0][:200]
        verdicts["pt2-dynamic-resolution"] = (f"REFUSED by torch.export: the loop depends on the resolution "
                                              f"({type(error).__name__}: {reason})")
    verdicts["artifact"] = (f"exported for {train_size}x{train_size} with a dynamic batch; other resolutions are "
                            "refused by the input schema instead of being answered wrongly")
    return verdicts


def run(config: FashionConfig, serve: bool = False) -> dict[str, Any]:
    import torch
    from torch import nn

    from torchwork import EarlyStopping, Trainer, seed_everything
    from torchwork.data import classification_metrics, format_metrics, load_dataset, loader
    from torchwork.deploy import export, format_report
    from torchwork.engine.metrics import accuracy, macro_f1
    from torchwork.files import write_json
    from torchwork.recipes.models import AdaptiveDepthCNN
    from torchwork.report.html import Report
    from torchwork.report.plots import confusion_png, curves_png

    started = time.perf_counter()
    if config.threads:
        torch.set_num_threads(config.threads)
    seed_everything(config.seed)
    say("== 1. Data: Fashion-MNIST")
    dataset = load_dataset("fashion_mnist", seed=config.seed)
    say(dataset.describe())
    train = dataset.train
    if config.subset and config.subset < len(train):
        generator = torch.Generator().manual_seed(config.seed)
        train = torch.utils.data.Subset(train, torch.randperm(len(train), generator=generator)[: config.subset].tolist())

    say("\n== 2. Model: a CNN whose depth follows the resolution")
    model = AdaptiveDepthCNN(len(dataset.classes), channels=config.channels)
    train_loader = loader(train, config.batch_size, shuffle=True, seed=config.seed, num_workers=0)
    val_loader = loader(dataset.validation, 512, num_workers=0)
    test_loader = loader(dataset.test, 512, num_workers=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", clip_grad_norm=5.0,
                      metrics={"accuracy": accuracy}, epoch_metrics={"macro_f1": macro_f1},
                      early_stopping=EarlyStopping("val_accuracy", mode="max", patience=config.patience),
                      run_dir=config.run_dir, config=dataclasses.asdict(config))
    history = trainer.fit(train_loader, val_loader, epochs=config.epochs)
    run_path = trainer.run_path
    if not trainer.world.is_rank_zero:
        return {}  # under torchrun, rank 0 evaluates, exports and reports
    model.load_state_dict(torch.load(run_path / "checkpoints" / "best.pt", weights_only=True)["model"])

    say("\n== 3. Evaluation on the test split")
    predictions = trainer.predict(test_loader).argmax(dim=-1)
    metrics = classification_metrics(dataset.test.labels, predictions.numpy(), dataset.classes)
    say(format_metrics(metrics))

    say("\n== 4. Export: resolution is part of the contract")
    verdicts = resolution_check(model)
    for name, verdict in verdicts.items():
        say(f"  {name:<24} {verdict}")
    images = torch.stack([dataset.test[i][0] for i in range(512)])
    labels = [dataset.test[i][1] for i in range(512)]
    artifact = run_path / "artifact"
    report = export(model, images[:8], artifact, formats=config.export_formats, labels=list(dataset.classes),
                    softmax=True, samples=images, targets=labels, overwrite=True)
    say(format_report(report["verify"]))

    summary = {"test": {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"]},
               "artifact": str(artifact), "report": str(run_path / "report.html"),
               "deploy_variant": report["deploy"], "resolution_check": verdicts,
               "seconds": round(time.perf_counter() - started, 1)}
    html = Report("Fashion-MNIST with a resolution-adaptive CNN")
    html.table("Test split", ["accuracy", "macro-F1"], [[metrics["accuracy"], metrics["macro_f1"]]])
    html.image(curves_png(history, ["train_loss", "val_loss"], "loss"), "loss curves")
    html.image(curves_png(history, ["val_accuracy", "val_macro_f1"], "validation"), "validation metrics")
    html.image(confusion_png(metrics["confusion_matrix"], dataset.classes), "confusion matrix")
    html.heading("Exporters and the resolution-dependent loop")
    html.table(None, ["exporter", "verdict"], list(verdicts.items()))
    html.heading("Summary")
    html.code(summary)
    html.write(run_path / "report.html")
    write_json(run_path / "summary.json", summary)
    say(f"\nreport:  {run_path / 'report.html'}")
    say(f"serve it: torchwork serve {artifact}")
    return summary
