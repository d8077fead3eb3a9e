"""The sentiment recipe's transformer: all-MiniLM-L6-v2 fine-tuned on the tweets, exported, INT8, served.

What :func:`train_transformer` does, in order:

1. tokenizes with the MiniLM WordPiece tokenizer (``tokenizers``; the same object is bundled in the
   artifact), and batches by length (:mod:`torchwork.recipes.transformer_texts`);
2. chooses how to train by measurement (:func:`torchwork.recipes.transformer_strategy.choose_strategy`): a
   few real training steps of the whole model against the frozen-bottom option (the bottom's forward once,
   then steps of the top on cached features); whole fine-tuning is used unless its estimated time is over
   twice the cached option's and over five minutes, which is what happens on a CPU (``device="auto"`` on a
   GPU fine-tunes it whole);
3. trains with the Trainer: class-weighted loss, gradient clipping, linear warm-up then linear decay,
   layer-wise learning rates (:func:`torchwork.finetune.param_groups`), early stopping on validation
   macro-F1, best checkpoint kept;
4. evaluates the whole model on every split; :func:`transformer_sections` then exports it to ONNX with the
   tokenizer, quantizes MatMul to INT8 and verifies every variant on the whole test split
   (:mod:`torchwork.recipes.transformer_export`); eager against INT8 at batch 1 and 64 is read from the
   verification's timing table, not timed a second time.

Its settings are a :class:`~torchwork.recipes.transformer_settings.TransformerSettings`, read once from the
SentimentConfig.

Example (trains a model, so not run here):
    from torchwork.recipes.sentiment import SentimentConfig, run
    run(SentimentConfig(model="transformer"))
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torchwork.recipes.config import compile_choice
from torchwork.recipes.epoch_estimate import epoch_estimate
from torchwork.recipes.transformer_export import export_transformer, int8_speed
from torchwork.recipes.transformer_settings import TransformerSettings
from torchwork.recipes.transformer_strategy import choose_strategy
from torchwork.recipes.transformer_texts import (
    TokenTexts,
    bottom_module,
    cached_probabilities,
    length_loader,
    predict_outputs,
    release_memory,
    subword_tokenizer,
)


def say(text: str = "") -> None:
    print(text, flush=True)


def adamw(groups: Any, device: Any) -> Any:
    """AdamW over ``groups``, fused (one kernel for every parameter) on the CPU and CUDA, where torch has it.

    The default implementation loops over the tensors in Python: on the quickstart's top (34 tensors, 3.5M
    weights, one thread) its step took 8.1 ms against 2.8 ms fused, about 3% of each training step, and the
    weights they reach agree to float rounding (tests/recipes/test_recipes_transformer.py).

    >>> import torch
    >>> adamw([torch.nn.Parameter(torch.zeros(2))], torch.device("cpu")).defaults["fused"]
    True
    """
    import torch

    return torch.optim.AdamW(groups, fused=True if torch.device(device).type in ("cpu", "cuda") else None)


def warmup_decay(total_steps: int, warmup: float) -> Any:
    """The lr multiplier of step ``s``: linear warm-up over ``warmup`` of the steps, then linear decay to 0.

    >>> f = warmup_decay(10, 0.2)
    >>> [round(f(s), 2) for s in (0, 1, 2, 6, 10)]
    [0.5, 1.0, 1.0, 0.5, 0.0]
    """
    warm = max(1, round(total_steps * warmup))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total_steps - step) / max(1, total_steps - warm))

    return factor


@dataclasses.dataclass
class TransformerResult:
    model: Any
    strategy: str
    timing: dict[str, Any]
    precision: str
    history: list[dict[str, Any]]
    lr_steps: list[float]  # the head's lr at every step run
    best: dict[str, Any]
    training_seconds: float
    cache_seconds: float
    run_path: Path
    splits: dict[str, dict[str, Any]]  # split -> classification metrics
    test_probabilities: Any
    test_outputs: Any = None  # the model's logits on the test split, in its order: verify's eager reference
    epoch_estimate: dict[str, float] = dataclasses.field(default_factory=dict)  # estimated and measured epoch


@dataclasses.dataclass
class _Prepared:
    """What the chosen strategy trains: the module, its loaders, its head's name, its precision (and how it
    was chosen), and the cached bottom features of the train and validation splits (cached strategy)."""

    trained: Any
    train_loader: Any
    val_loader: Any
    head: str
    precision: str
    precision_timing: dict[str, Any]
    cached: dict[str, Any]
    cache_seconds: float = 0.0


def train_transformer(settings: TransformerSettings, train: Any, validation: Any, test: Any, classes: list[str],
                      run_dir: Path, decisions: Any = None, callbacks: Sequence[Any] = ()) -> TransformerResult:
    """Fine-tune MiniLM on the splits (see the module docstring); the run folder is under ``run_dir``.
    ``decisions`` (:class:`~torchwork.recipes.recorded.Decisions`): where the measured strategy and precision
    are recorded, and read back from when the run is resumed (or by the next trial of a time budget);
    ``callbacks``: the Trainer's extra callbacks (a budget's trial: pruning, the plan's stop)."""
    from torch import nn

    from torchwork.data import class_weights
    from torchwork.engine.devices import resolve_device

    train = _training_rows(settings, train)
    tokenizer = subword_tokenizer(settings.transformer_max_length, settings.model_dir)
    data = {name: TokenTexts(split.texts, split.labels, tokenizer)
            for name, split in (("train", train), ("validation", validation), ("test", test))}
    model = encoder_classifier(settings, len(classes))
    device = resolve_device(settings.device)
    loss_fn = nn.CrossEntropyLoss(weight=class_weights(train.labels).to(device))
    probe = _probe_batch(settings, data["train"])
    strategy, timing = _strategy(settings, model, probe, len(train), len(validation), loss_fn, device, decisions)
    if strategy == "cached":
        prepared = _prepare_cached(settings, model, data, probe, loss_fn, device, decisions)
    else:
        prepared = _prepare_full(settings, model, data, loss_fn, device, decisions)
    trainer, factor = _trainer(settings, prepared, loss_fn, device, run_dir, strategy, timing, callbacks)
    estimate = epoch_estimate(prepared.trained, prepared.train_loader, prepared.val_loader, loss_fn, device,
                              prepared.precision, settings.transformer_epochs)
    say(f"estimated epoch: {estimate['epoch_s']:.1f} s ({len(prepared.train_loader)} steps of "
        f"{estimate['step_s']:.3f} s, {estimate['validation_s']:.1f} s of validation, "
        f"{estimate['new_shape_s']:.3f} s for each of {estimate['batch_shapes']:.0f} batch shapes first seen; "
        f"timed on the first batches, {settings.transformer_epochs} epochs)")
    started = time.perf_counter()
    history = trainer.fit(prepared.train_loader, prepared.val_loader, epochs=settings.transformer_epochs)
    training_seconds = time.perf_counter() - started + prepared.cache_seconds
    epochs_run = sum("time_s" in h for h in history)
    if epochs_run:  # the fit's wall time per epoch, validation and checkpoints included, as the estimate is
        estimate["measured_epoch_s"] = (time.perf_counter() - started) / epochs_run
        say(f"an epoch took {estimate['measured_epoch_s']:.1f} s (the mean of {epochs_run}, validation included) "
            f"against the {estimate['epoch_s']:.1f} s estimated "
            f"({100 * (estimate['epoch_s'] / estimate['measured_epoch_s'] - 1):+.0f}%)")
    run_path = trainer.run_path
    best_info = _best_checkpoint(run_path, prepared.trained, len(prepared.train_loader))
    model.to("cpu").eval()
    lr_steps = [settings.transformer_lr * factor(s) for s in range(trainer.global_step)]
    splits, test_probabilities, test_outputs = _evaluate(settings, model, prepared, data, train, test, classes)
    return TransformerResult(model, strategy, timing, prepared.precision, history, lr_steps, best_info,
                             training_seconds, prepared.cache_seconds, run_path, splits, test_probabilities,
                             test_outputs, estimate)


def with_max_length(settings: TransformerSettings, train: Any) -> TransformerSettings:
    """``settings`` with ``transformer_max_length=0`` (fit's default) replaced by the 95th percentile of the
    training texts' token lengths under the model's tokenizer, capped by the model's positions; said."""
    from torchwork.finetune.max_length import PERCENTILE, choose_max_length, token_lengths
    from torchwork.finetune.minilm import minilm_folder

    if settings.transformer_max_length:
        return settings
    lengths, limit = token_lengths(list(train.texts), settings.model_dir or minilm_folder())
    chosen = choose_max_length(lengths, limit)
    cut = sum(length > chosen for length in lengths) / max(1, len(lengths))
    say(f"max_length: {chosen} tokens, the {PERCENTILE}th percentile of the {len(lengths):,} training texts' token "
        f"lengths (median {statistics.median(lengths):.0f}, longest {max(lengths)}; the model reads at most {limit}; "
        f"{100 * cut:.1f}% of the texts are cut; pin it with --set transformer_max_length=N)")
    return dataclasses.replace(settings, transformer_max_length=chosen)


def encoder_classifier(settings: TransformerSettings, classes: int) -> Any:
    """MiniLM, or (``model_dir``) the user's encoder folder, with a new head; what loaded is said."""
    from torchwork.finetune.encoder_model import EncoderClassifier
    from torchwork.finetune.encoders import check_model_folder
    from torchwork.finetune.minilm import MiniLMClassifier

    if not settings.model_dir:
        model = MiniLMClassifier(classes=classes)
        say(f"MiniLM (all-MiniLM-L6-v2): {sum(p.numel() for p in model.parameters()):,} parameters, every "
            "encoder weight loaded, the classification head new")
        return model
    folder = check_model_folder(settings.model_dir)
    model = EncoderClassifier(folder, classes=classes)
    report = model.load_report
    say(f"{folder.name} from {folder.path}: {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{model.num_layers} layers; {report.summary()}; the classification head new"
        + "".join(f"; {note}" for note in report.notes))
    return model


def _training_rows(settings: TransformerSettings, train: Any) -> Any:
    """The training split, or its stratified sample of ``transformer_train_rows`` rows."""
    from torchwork.recipes.sentiment_shared import stratified_subset

    if settings.transformer_train_rows and settings.transformer_train_rows < len(train):
        full_size = len(train)
        train = stratified_subset(train, settings.transformer_train_rows, settings.seed)
        say(f"the transformer trains on a stratified {len(train):,} of the {full_size:,} training tweets "
            "(transformer_train_rows)")
    return train


def _probe_batch(settings: TransformerSettings, data: TokenTexts) -> Any:
    """The training batch of median length among the first nine: the strategy and the precision are timed on it."""
    first = [b for _, b in zip(range(9), length_loader(data, data.lengths, settings.transformer_batch_size, True,
                                                        settings.seed, data.collate))]
    return sorted(first, key=lambda b: b[0][0].shape[1])[len(first) // 2]  # a batch of median length


def _strategy(settings: TransformerSettings, model: Any, probe: Any, train_rows: int, validation_rows: int,
              loss_fn: Any, device: Any, decisions: Any) -> tuple[str, dict[str, Any]]:
    """The training strategy and its timing: recorded by the run being resumed, configured, or measured on
    ``probe``; said, and recorded in ``decisions``."""
    size = settings.transformer_batch_size
    steps_per_epoch = -(-train_rows // size)
    kept = decisions.get("transformer_strategy") if decisions is not None else None
    if (isinstance(kept, dict) and kept.get("strategy") in ("cached", "full") and isinstance(kept.get("timing"), dict)
            and settings.transformer_strategy in ("auto", kept["strategy"])):
        strategy, timing = kept["strategy"], kept["timing"]
    else:
        kept = None
        strategy, timing = choose_strategy(
            settings.transformer_strategy, model, probe, train_layers=settings.transformer_train_layers,
            steps_per_epoch=steps_per_epoch, epochs=settings.transformer_epochs,
            cache_batches=steps_per_epoch + -(-validation_rows // 64), loss_fn=loss_fn, device=device)
        if decisions is not None:
            decisions.record("transformer_strategy", {"strategy": strategy, "timing": timing})
    model.to("cpu")
    if kept:
        say(f"strategy: {strategy} ({decisions.source})")
    elif timing.get("reason"):
        say(f"strategy: {strategy} (as configured)")
    else:
        say(f"strategy: {strategy}: measured on {timing['device']} at batch {size}: a whole-model step "
            f"{timing['step_s_full']:.3f} s, a top-{settings.transformer_train_layers} step on cached features "
            f"{timing['step_s_top']:.3f} s plus the bottom's forward {timing['bottom_forward_s']:.3f} s per batch "
            f"once; estimated training {timing['estimate_s_full']:.0f} s whole vs {timing['estimate_s_cached']:.0f} s "
            f"cached ({timing['rule']}; pin it with {timing.get('pin', f'--set transformer_strategy={strategy}')})")
    return strategy, timing


def _prepare_cached(settings: TransformerSettings, model: Any, data: dict[str, TokenTexts], probe: Any,
                    loss_fn: Any, device: Any, decisions: Any) -> _Prepared:
    """The cached strategy: the bottom frozen, its features of the train and validation tweets cached once (in
    the precision the top trains in), the top trained on them."""
    import torch

    from torchwork.finetune import cache_features, freeze
    from torchwork.finetune.encoder_model import EncoderTop
    from torchwork.recipes.buckets import trim_cached, trim_cached_for_prediction

    split_at = model.num_layers - settings.transformer_train_layers
    freeze(model, *model.frozen_names(split_at))
    bottom = bottom_module(model, split_at)
    trained = EncoderTop(model, split_at)
    with torch.no_grad():  # the top's probe batch, the median-length batch's bottom features (no
        (probe_ids, probe_mask), probe_target = probe  # inference_mode: the probe trains on them)
        probe_features = tuple(bottom(probe_ids, probe_mask))
    precision, precision_timing = _training_precision(settings, decisions, device, trained,
                                                      (probe_features, probe_target), loss_fn)
    started = time.perf_counter()
    cached: dict[str, Any] = {}
    for name in ("train", "validation"):
        ordered = length_loader(data[name], data[name].lengths, 64, False, settings.seed, data[name].collate)
        cached[name] = cache_features(bottom, ordered, device=str(device), desc=f"caching {name} features",
                                      precision=precision, ragged=True, storage=precision)
    cache_seconds = time.perf_counter() - started
    say(f"cached layer-{split_at} features of {len(data['train']) + len(data['validation']):,} texts in "
        f"{cache_seconds:.0f} s" + (" (the bottom in bf16, as the top trains)" if precision == "bf16" else ""))
    lengths = {n: [int(mask.sum()) for batch in c.batches for mask in batch[1]] for n, c in cached.items()}
    size = settings.transformer_batch_size
    train_loader = length_loader(cached["train"], lengths["train"], size, True, settings.seed, trim_cached)
    val_loader = length_loader(cached["validation"], lengths["validation"], 128, False, settings.seed,
                               trim_cached_for_prediction)
    return _Prepared(trained, train_loader, val_loader, "model.classifier", precision, precision_timing, cached,
                     cache_seconds)


def _prepare_full(settings: TransformerSettings, model: Any, data: dict[str, TokenTexts], loss_fn: Any,
                  device: Any, decisions: Any) -> _Prepared:
    """The full strategy: the whole model trained on padded token batches."""
    size = settings.transformer_batch_size
    train, validation = data["train"], data["validation"]
    train_loader = length_loader(train, train.lengths, size, True, settings.seed, train.collate)
    val_loader = length_loader(validation, validation.lengths, 128, False, settings.seed,
                               validation.collate_for_prediction)
    precision, precision_timing = _training_precision(settings, decisions, device, model, next(iter(train_loader)),
                                                      loss_fn)
    return _Prepared(model, train_loader, val_loader, "classifier", precision, precision_timing, {})


def _trainer(settings: TransformerSettings, prepared: _Prepared, loss_fn: Any, device: Any, run_dir: Path,
             strategy: str, timing: dict[str, Any], callbacks: Sequence[Any] = ()) -> tuple[Any, Any]:
    """The Trainer of ``prepared`` (layer-wise AdamW, warm-up then decay, early stopping on validation
    macro-F1), and the lr multiplier of each step."""
    import torch

    from torchwork import EarlyStopping, Trainer
    from torchwork.engine.metrics import macro_f1
    from torchwork.finetune import param_groups

    groups = param_groups(prepared.trained, lr=settings.transformer_lr, layer_decay=settings.layer_decay,
                          head=prepared.head, weight_decay=0.01)
    say(str(groups))
    optimizer = adamw(groups, device)
    total_steps = settings.transformer_epochs * len(prepared.train_loader)
    factor = warmup_decay(total_steps, settings.warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    trainer = Trainer(prepared.trained, optimizer, loss_fn, scheduler, device=device, precision=prepared.precision,
                      threads=settings.threads or "auto", compile=compile_choice(settings.compile),
                      clip_grad_norm=settings.clip_grad_norm, epoch_metrics={"macro_f1": macro_f1},
                      callbacks=callbacks,
                      early_stopping=EarlyStopping("val_macro_f1", mode="max", patience=settings.transformer_patience),
                      run_dir=run_dir, config={**settings.recorded, "strategy": strategy, "strategy_timing": timing,
                                               "precision_chosen": prepared.precision,
                                               "precision_timing": prepared.precision_timing})
    return trainer, factor


def _best_checkpoint(run_path: Path, trained: Any, steps_per_epoch: int) -> dict[str, Any]:
    """The best checkpoint's weights loaded into ``trained``; what best.json says of it, with its epoch."""
    import torch

    from torchwork.runs.best_record import read_best_record

    best_info = read_best_record(run_path)  # first: a run with no best checkpoint is said so by name
    best = torch.load(run_path / "checkpoints" / "best.pt", weights_only=True)
    trained.load_state_dict(best["model"])
    best_info["epoch"] = int(round(best_info["step"] / max(1, steps_per_epoch)))
    say(f"best checkpoint: val macro-F1 {best_info['value']:.4f} after epoch {best_info['epoch']} "
        f"(step {best_info['step']})")
    return best_info


def _evaluate(settings: TransformerSettings, model: Any, prepared: _Prepared, data: dict[str, TokenTexts],
              train: Any, test: Any, classes: list[str]) -> tuple[dict[str, dict[str, Any]], Any, Any]:
    """Classification metrics of every split, and the test split's probabilities and outputs (logits)."""
    from torchwork.data import classification_metrics
    from torchwork.recipes.sentiment_shared import stratified_rows

    splits = {}
    test_probabilities = test_outputs = None
    # The train split's rows come from a stratified sample the size of the test split: the whole-model
    # forward over every training tweet would cost minutes on a CPU and say little more. With the cached
    # strategy, train and validation rows go through the top alone from their cached bottom features: the
    # same model, without the bottom's forward a second time.
    picked = stratified_rows(train.labels, len(test), settings.seed)
    for name in ("train", "validation", "test"):
        key = f"train ({len(picked):,} sampled)" if name == "train" and len(picked) < len(train) else name
        rows = picked if name == "train" else None
        if name in prepared.cached:
            probabilities, labels = cached_probabilities(prepared.trained, prepared.cached[name], data[name].lengths,
                                                         rows, desc=f"predicting {key}")
        else:
            texts = data[name] if rows is None else data[name].subset(rows)
            outputs, labels = predict_outputs(model, texts, desc=f"predicting {key}"), texts.labels
            probabilities = outputs.softmax(dim=-1)
        splits[key] = classification_metrics(labels, probabilities.argmax(dim=-1).numpy(), classes)
        if name == "test":
            test_probabilities, test_outputs = probabilities, outputs
    return splits, test_probabilities, test_outputs


def _training_precision(settings: TransformerSettings, decisions: Any, device: Any, trained: Any, batch: Any,
                        loss_fn: Any) -> tuple[str, dict[str, Any]]:
    """The transformer's training precision: recorded by the run being resumed, configured, or measured on
    ``batch`` (fp32 off the CPU); said, and recorded in ``decisions``."""
    from torchwork.recipes.sentiment_shared import choose_precision, precision_words

    kept = decisions.get("transformer_precision") if decisions is not None else None
    if isinstance(kept, dict) and kept.get("precision") in ("32", "bf16") and isinstance(kept.get("timing"), dict):
        say(f"precision: {kept['precision']} ({decisions.source})")
        return kept["precision"], kept["timing"]
    requested = settings.transformer_precision if settings.transformer_precision != "auto" else settings.precision
    precision, timing = choose_precision(requested if device.type == "cpu" else "32", trained, batch, loss_fn,
                                         steps=4)
    if decisions is not None:
        decisions.record("transformer_precision", {"precision": precision, "timing": timing})
    say(precision_words(precision, timing, "training step"))
    return precision, timing


def transformer_sections(settings: TransformerSettings, train: Any, validation: Any, test: Any, classes: list[str], run_path: Path,
                         models: dict[str, Any], decisions: Any = None, budget: Any = None) -> dict[str, Any]:
    """The quickstart's transformer steps (printed as sections 5 and 6); returns what the summary and the
    report need about the served model, and adds it to ``models``. ``budget``: ``fit --time-budget``'s plan,
    whose ``encoder_trials`` tune the fine-tuning inside it (:func:`torchwork.tune.budget_transformer.tuned_transformer`)."""
    from torchwork.data import format_metrics
    from torchwork.deploy import format_report
    from torchwork.recipes.sentiment_shared import export_threads

    say("\n== 5. Transformer: " + (f"{settings.model_dir} fine-tuned on your data" if settings.model_dir
                                    else "all-MiniLM-L6-v2 fine-tuned on the tweets"))
    settings = with_max_length(settings, train)
    if budget is None or budget.encoder_trials is None:
        result = train_transformer(settings, train, validation, test, classes, run_path / "transformer", decisions)
    else:  # the trials that fit (the plan's tuner: tune.budget_transformer); the best model is exported as it is
        result, settings = budget.encoder_trials(budget, settings, train, validation, test, classes, run_path,
                                                 decisions)
    release_memory()  # the feature cache and the training's tensors are freed: their pages go back before export
    metrics = result.splits["test"]
    say(format_metrics(metrics))
    ngram = models["ngram"]["macro_f1"]
    say(f"transformer test macro-F1 {metrics['macro_f1']:.4f} vs n-gram {ngram:.4f} "
        f"({100 * (metrics['macro_f1'] - ngram):+.1f} points) vs baseline {models['baseline']['macro_f1']:.4f}")
    models["transformer"] = {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                             "training_seconds": round(result.training_seconds, 1)}

    say("\n== 6. Export to ONNX with the tokenizer, INT8 MatMul, verification on the whole test split")
    export_threads(settings.threads, say)
    artifact = run_path / "artifact"
    kept = decisions.get("transformer_export") if decisions is not None else None
    kept = kept if isinstance(kept, dict) else None
    report = export_transformer(result.model, settings, artifact, train, validation, test, classes, kept,
                                result.test_outputs)
    fallback = report["parity"]["formats"].get("onnx-int8", {}).get("fallback") or {}
    if decisions is not None:
        decisions.record("transformer_export", {"deploy": report["deploy"], "margin": fallback.get("margin")})
    if report.get("verify"):
        say(format_report(report["verify"]))
    for name, reason in report["refused"].items():
        say(f"refused {name}: {reason}")
    say(f"variant to deploy: {report['deploy']}" + (" (recorded by the run being resumed)" if kept else ""))
    speed = {}
    if "onnx-int8" in report["variants"]:
        fallback = report["parity"]["formats"]["onnx-int8"].get("fallback")
        if fallback and fallback["margin"] is not None:
            say(f"INT8 float fallback: rows with a top-2 margin <= {fallback['margin']:.3f} are answered by float "
                f"ONNX ({100 * fallback['rows_rerun']:.1f}% of {fallback['calibration_rows']:,} validation tweets; "
                f"agreement with float there {100 * fallback['agreement_without']:.2f}% -> "
                f"{100 * fallback['agreement_with']:.2f}%)")
        speed = int8_speed(report["verify"])
        say("INT8 against eager (from the table above: median items/s, interleaved, real test tweets): " + "; ".join(
            f"{k.replace('_', ' ')}: eager {v['eager_per_s']}/s, INT8 {v['int8_per_s']}/s "
            f"({v['int8_speedup']}x)" for k, v in speed.items()))
    return {"name": "transformer", "artifact": artifact, "verify_report": report, "metrics": metrics,
            "history": result.history, "precision": result.precision, "training_seconds": result.training_seconds,
            "speed": speed, "splits": result.splits, "lr_steps": result.lr_steps, "best": result.best,
            "strategy": result.strategy, "strategy_timing": result.timing, "epoch_estimate": result.epoch_estimate,
            "max_length": settings.transformer_max_length,
            "test_probabilities": result.test_probabilities.tolist(), "device": result.timing.get("device", "")}
