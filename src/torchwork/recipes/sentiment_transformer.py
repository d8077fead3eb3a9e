"""The sentiment recipe's transformer: all-MiniLM-L6-v2 fine-tuned on the tweets, exported, INT8, served.

What :func:`train_transformer` does, in order:

1. tokenizes with the MiniLM WordPiece tokenizer (``tokenizers``; the same object is bundled in the
   artifact), and batches by length (:mod:`torchwork.recipes.buckets`);
2. chooses how to train by measurement (:func:`choose_strategy`): a few real training steps of the whole
   model against the frozen-bottom option (the bottom's forward once, then steps of the top on cached
   features); whole fine-tuning is used unless its estimated time is over twice the cached option's and
   over five minutes, which is what happens on a CPU (``device="auto"`` on a GPU fine-tunes it whole);
3. trains with the Trainer: class-weighted loss, gradient clipping, linear warm-up then linear decay,
   layer-wise learning rates (:func:`torchwork.finetune.param_groups`), early stopping on validation
   macro-F1, best checkpoint kept;
4. evaluates the whole model on every split, exports it to ONNX with the tokenizer, quantizes MatMul to
   INT8 and verifies every variant on the whole test split; eager against INT8 at batch 1 and 64 is read
   from the verification's timing table (:func:`int8_speed`), not timed a second time.

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

from torchwork.errors import ConfigError
from torchwork.recipes.config import compile_choice

STRATEGIES = ("auto", "cached", "full")
FULL_BUDGET_S = 300.0  # whole fine-tuning is always affordable under this estimate
# Validation tweets set the INT8 fallback margin (and the smoothing scales): the model was fitted to the
# training tweets, on which INT8 flipped 1.4% of answers against 2.6% of validation and test tweets, so a
# margin chosen there fell short on the test split (98.9% agreement for 99.5% asked; 99.4% from validation).
CALIBRATION_ROWS = 3600
FULL_OVER_CACHED = 2.0  # ... and otherwise while it costs at most this many times the cached option


def say(text: str = "") -> None:
    print(text, flush=True)


class TokenTexts:
    """A map-style dataset of ``(token ids without padding, label)`` from texts and a SubwordTokenizer."""

    def __init__(self, texts: Sequence[str], labels: Sequence[int], tokenizer: Any) -> None:
        encodings = tokenizer.tokenizer.encode_batch(list(texts))
        self.ids = [e.ids[:sum(e.attention_mask)] for e in encodings]
        self.labels = [int(label) for label in labels]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[list[int], int]:
        return self.ids[index], self.labels[index]

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.ids]

    def subset(self, rows: Sequence[int]) -> TokenTexts:
        """These ``rows`` (indices), not tokenized again."""
        part = object.__new__(TokenTexts)
        part.ids, part.labels = [self.ids[i] for i in rows], [self.labels[i] for i in rows]
        return part


def _bottom_module(model: Any, layers: int) -> Any:
    from torch import nn

    class Bottom(nn.Module):  # the frozen prefix: embeddings and the first ``layers`` layers, and only those
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = model.encoder.embeddings
            self.layers = nn.ModuleList(model.encoder.encoder.layer[:layers])
            self.run_bottom = model.bottom  # a bound method: the top's weights are not registered here

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.run_bottom(input_ids, attention_mask, layers=layers)

    return Bottom()


def _time_steps(model: Any, inputs: tuple[Any, ...], target: Any, loss_fn: Any, steps: int) -> list[float]:
    """Seconds of each training step (forward, backward, AdamW step) on ``inputs``, the warm-up left out."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-9)  # a negligible step: the weights barely move
    times = []
    for index in range(steps + 1):
        start = time.perf_counter()
        loss = loss_fn(model(*inputs), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if index:  # the first step warms up
            times.append(time.perf_counter() - start)
    optimizer.zero_grad(set_to_none=True)
    return times


def choose_strategy(requested: str, model: Any, batch: tuple[tuple[Any, Any], Any], *, train_layers: int,
                    steps_per_epoch: int, epochs: int, cache_batches: int, loss_fn: Any, device: Any,
                    steps: int = 3) -> tuple[str, dict[str, Any]]:
    """``("full" | "cached", timing)``: whole fine-tuning, or the top ``train_layers`` on cached features.

    Both options are timed on ``batch`` (a real, typical-length batch) on ``device``, and their training time
    estimated: full = step x steps_per_epoch x epochs; cached = bottom forward x cache_batches + top step
    x steps_per_epoch x epochs. Full, the default, is kept unless it is over ``FULL_OVER_CACHED`` times the
    cached estimate and over ``FULL_BUDGET_S`` even with the timing spread taken in full's favour (full's
    steps at their median less their spread, cached's at theirs plus it): a busy machine keeps the default.
    """
    import torch

    from torchwork.finetune import freeze, unfreeze
    from torchwork.finetune.minilm import MiniLMTop

    if requested not in STRATEGIES:
        raise ConfigError(f"transformer_strategy={requested!r}: choose from {', '.join(STRATEGIES)}.")
    if requested != "auto":
        return requested, {"reason": "as configured"}
    (ids, mask), target = batch
    ids, mask, target = ids.to(device), mask.to(device), target.to(device)
    split = model.num_layers - train_layers
    model.to(device).train()
    unfreeze(model)
    full_steps = _time_steps(model, (ids, mask), target, loss_fn, steps)
    freeze(model, "encoder.embeddings", *[f"encoder.encoder.layer.{i}" for i in range(split)])
    bottom = _bottom_module(model, split)
    bottom_times = []
    with torch.inference_mode():
        for _ in range(steps):
            start = time.perf_counter()
            hidden, _ = bottom(ids, mask)
            bottom_times.append(time.perf_counter() - start)
    top_steps = _time_steps(MiniLMTop(model, split), (hidden.clone(), mask), target, loss_fn, steps)
    unfreeze(model)
    timing = strategy_rule(full_steps, top_steps, bottom_times, steps_per_epoch * epochs, cache_batches)
    timing.update(device=str(device), train_layers=train_layers)
    return timing.pop("chosen"), timing


def strategy_rule(full_steps: Sequence[float], top_steps: Sequence[float], bottom_times: Sequence[float],
                  trained_steps: int, cache_batches: int) -> dict[str, Any]:
    """The strategy (``chosen``) from timed samples, and the estimates behind it: whole fine-tuning unless,
    with the spread counted in its favour, it is over ``FULL_OVER_CACHED`` times the cached option and over
    ``FULL_BUDGET_S``.

    >>> strategy_rule([1.0, 1.5, 2.0], [0.1] * 3, [0.1] * 3, 200, 50)["chosen"]   # 300 s within the budget
    'full'
    >>> strategy_rule([4.0] * 3, [0.1] * 3, [0.1] * 3, 200, 50)["chosen"]        # 800 s against 25 s
    'cached'
    """
    from torchwork.deploy.choice import spread

    full_step, top_step, bottom_s = (statistics.median(t) for t in (full_steps, top_steps, bottom_times))
    full_total = full_step * trained_steps
    cached_total = bottom_s * cache_batches + top_step * trained_steps
    full_low = max(0.0, full_step - spread(full_steps)) * trained_steps
    cached_high = (bottom_s + spread(bottom_times)) * cache_batches + (top_step + spread(top_steps)) * trained_steps
    chosen = "full" if full_low <= max(FULL_OVER_CACHED * cached_high, FULL_BUDGET_S) else "cached"
    return {"chosen": chosen, "step_s_full": round(full_step, 4), "step_s_top": round(top_step, 4),
            "bottom_forward_s": round(bottom_s, 4), "estimate_s_full": round(full_total, 1),
            "estimate_s_cached": round(cached_total, 1), "estimate_s_full_low": round(full_low, 1),
            "estimate_s_cached_high": round(cached_high, 1),
            "rule": f"full unless its estimate, less the timing spread, is over {FULL_OVER_CACHED:g}x the cached "
                    f"one plus the spread and over {FULL_BUDGET_S:g} s",
            "pin": f"--set transformer_strategy={chosen}"}


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


def _loader(data: Any, lengths: Sequence[int], batch_size: int, shuffle: bool, seed: int, collate: Any) -> Any:
    import torch

    from torchwork.recipes.buckets import LengthBuckets

    return torch.utils.data.DataLoader(data, batch_sampler=LengthBuckets(lengths, batch_size, shuffle=shuffle,
                                                                         seed=seed), collate_fn=collate)


def predict_outputs(model: Any, data: TokenTexts, batch_size: int = 64, device: Any = "cpu",
                    desc: str = "predicting") -> Any:
    """The outputs (logits) of ``model`` over ``data`` in the data's order (batched by length), with a
    progress line: the whole model over thousands of tweets takes minutes on a CPU."""
    import torch

    from torchwork.engine.progress import ProgressBar
    from torchwork.recipes.buckets import LengthBuckets, pad_batch

    model.eval()
    out = torch.empty((len(data), model.classifier.out_features))
    batches = LengthBuckets(data.lengths, batch_size, shuffle=False)
    bar = ProgressBar(len(batches), desc=desc)
    with torch.inference_mode():
        for batch in batches:
            (ids, mask), _ = pad_batch([data[i] for i in batch])
            out[batch] = model(ids.to(device), mask.to(device)).float().cpu()
            bar.update(len(batch))
    bar.close()
    return out


def predict_probabilities(model: Any, data: TokenTexts, batch_size: int = 64, device: Any = "cpu",
                          desc: str = "predicting") -> Any:
    """Softmax probabilities of ``model`` over ``data`` in the data's order (:func:`predict_outputs`)."""
    return predict_outputs(model, data, batch_size, device, desc).softmax(dim=-1)


def cached_probabilities(top: Any, cache: Any, lengths: Sequence[int], rows: Sequence[int] | None = None,
                         batch_size: int = 128, desc: str = "predicting") -> tuple[Any, list[int]]:
    """Softmax probabilities of ``top`` over a split's cached bottom features, and the rows' labels.

    ``cache`` holds the split's rows in the order :func:`_loader` cached them (by length, ``LengthBuckets``
    without shuffling, over ``lengths``); ``rows``: indices into the split (default: every row). The rows
    are read in that order, so a batch of ``batch_size`` is trimmed to its own longest row.
    """
    import torch

    from torchwork.engine.progress import ProgressBar
    from torchwork.recipes.buckets import LengthBuckets, trim_cached

    order = [index for batch in LengthBuckets(lengths, 64, shuffle=False) for index in batch]
    if rows is None:
        positions = list(range(len(order)))
    else:
        where = {row: position for position, row in enumerate(order)}
        positions = sorted(where[row] for row in rows)
    top.eval()
    outputs, labels = [], []
    bar = ProgressBar(-(-len(positions) // batch_size), desc=desc)  # counts batches, and their rows
    with torch.inference_mode():
        for start in range(0, len(positions), batch_size):
            (hidden, mask), target = trim_cached([cache[k] for k in positions[start:start + batch_size]])
            outputs.append(top(hidden, mask).float().softmax(dim=-1))
            labels.extend(int(label) for label in target.tolist())
            bar.update(len(target))
    bar.close()
    return torch.cat(outputs), labels


def train_transformer(config: Any, train: Any, validation: Any, test: Any, classes: list[str],
                      run_dir: Path, decisions: Any = None) -> TransformerResult:
    """Fine-tune MiniLM on the splits (see the module docstring); the run folder is under ``run_dir``.
    ``decisions`` (:class:`~torchwork.recipes.recorded.Decisions`): where the measured strategy and precision
    are recorded, and read back from when the run is resumed."""
    import torch
    from torch import nn

    from torchwork import EarlyStopping, Trainer
    from torchwork.data import class_weights, classification_metrics
    from torchwork.engine.devices import resolve_device
    from torchwork.engine.metrics import macro_f1
    from torchwork.finetune import cache_features, freeze, param_groups
    from torchwork.finetune.minilm import MiniLMClassifier, MiniLMTop
    from torchwork.recipes.buckets import pad_batch, trim_cached
    from torchwork.recipes.sentiment_shared import stratified_rows, stratified_subset

    if config.transformer_train_rows and config.transformer_train_rows < len(train):
        full_size = len(train)
        train = stratified_subset(train, config.transformer_train_rows, config.seed)
        say(f"the transformer trains on a stratified {len(train):,} of the {full_size:,} training tweets "
            "(transformer_train_rows)")
    tokenizer = subword_tokenizer(config.transformer_max_length)
    data = {name: TokenTexts(split.texts, split.labels, tokenizer)
            for name, split in (("train", train), ("validation", validation), ("test", test))}
    model = MiniLMClassifier(classes=len(classes))
    say(f"MiniLM (all-MiniLM-L6-v2): {sum(p.numel() for p in model.parameters()):,} parameters, every "
        "encoder weight loaded, the classification head new")
    device = resolve_device(config.device)
    loss_fn = nn.CrossEntropyLoss(weight=class_weights(train.labels).to(device))
    size = config.transformer_batch_size
    steps_per_epoch = -(-len(train) // size)
    first = [b for _, b in zip(range(9), _loader(data["train"], data["train"].lengths, size, True, config.seed,
                                                  pad_batch))]
    probe = sorted(first, key=lambda b: b[0][0].shape[1])[len(first) // 2]  # a batch of median length
    kept = decisions.get("transformer_strategy") if decisions is not None else None
    if (isinstance(kept, dict) and kept.get("strategy") in ("cached", "full") and isinstance(kept.get("timing"), dict)
            and config.transformer_strategy in ("auto", kept["strategy"])):
        strategy, timing = kept["strategy"], kept["timing"]
    else:
        kept = None
        strategy, timing = choose_strategy(
            config.transformer_strategy, model, probe, train_layers=config.transformer_train_layers,
            steps_per_epoch=steps_per_epoch, epochs=config.transformer_epochs,
            cache_batches=steps_per_epoch + -(-len(validation) // 64), loss_fn=loss_fn, device=device)
        if decisions is not None:
            decisions.record("transformer_strategy", {"strategy": strategy, "timing": timing})
    model.to("cpu")
    if kept:
        say(f"strategy: {strategy} (recorded by the run being resumed)")
    elif timing.get("reason"):
        say(f"strategy: {strategy} (as configured)")
    else:
        say(f"strategy: {strategy}: measured on {timing['device']} at batch {size}: a whole-model step "
            f"{timing['step_s_full']:.3f} s, a top-{config.transformer_train_layers} step on cached features "
            f"{timing['step_s_top']:.3f} s plus the bottom's forward {timing['bottom_forward_s']:.3f} s per batch "
            f"once; estimated training {timing['estimate_s_full']:.0f} s whole vs {timing['estimate_s_cached']:.0f} s "
            f"cached ({timing['rule']}; pin it with {timing.get('pin', f'--set transformer_strategy={strategy}')})")

    cache_seconds = 0.0
    cached: dict[str, Any] = {}
    if strategy == "cached":
        split_at = model.num_layers - config.transformer_train_layers
        freeze(model, "encoder.embeddings", *[f"encoder.encoder.layer.{i}" for i in range(split_at)])
        bottom = _bottom_module(model, split_at)
        trained: Any = MiniLMTop(model, split_at)
        with torch.no_grad():  # the top's probe batch, the median-length batch's bottom features (no
            (probe_ids, probe_mask), probe_target = probe  # inference_mode: the probe trains on them)
            probe_features = tuple(bottom(probe_ids, probe_mask))
        precision, precision_timing = _training_precision(config, decisions, device, trained,
                                                          (probe_features, probe_target), loss_fn)
        started = time.perf_counter()
        for name in ("train", "validation"):
            ordered = _loader(data[name], data[name].lengths, 64, False, config.seed, pad_batch)
            cached[name] = cache_features(bottom, ordered, device=str(device), desc=f"caching {name} features",
                                          precision=precision, ragged=True)
        cache_seconds = time.perf_counter() - started
        say(f"cached layer-{split_at} features of {len(train) + len(validation):,} tweets in {cache_seconds:.0f} s"
            + (" (the bottom in bf16, as the top trains)" if precision == "bf16" else ""))
        lengths = {n: [int(mask.sum()) for batch in c.batches for mask in batch[1]] for n, c in cached.items()}
        train_loader = _loader(cached["train"], lengths["train"], size, True, config.seed, trim_cached)
        val_loader = _loader(cached["validation"], lengths["validation"], 128, False, config.seed, trim_cached)
        head = "model.classifier"
    else:
        trained = model
        train_loader = _loader(data["train"], data["train"].lengths, size, True, config.seed, pad_batch)
        val_loader = _loader(data["validation"], data["validation"].lengths, 128, False, config.seed, pad_batch)
        head = "classifier"
        precision, precision_timing = _training_precision(config, decisions, device, trained,
                                                          next(iter(train_loader)), loss_fn)

    groups = param_groups(trained, lr=config.transformer_lr, layer_decay=config.layer_decay, head=head,
                          weight_decay=0.01)
    say(str(groups))
    optimizer = adamw(groups, device)
    total_steps = config.transformer_epochs * len(train_loader)
    factor = warmup_decay(total_steps, config.warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    trainer = Trainer(trained, optimizer, loss_fn, scheduler, device=device, precision=precision,
                      threads=config.threads or "auto", compile=compile_choice(config.compile),
                      clip_grad_norm=config.clip_grad_norm, epoch_metrics={"macro_f1": macro_f1},
                      early_stopping=EarlyStopping("val_macro_f1", mode="max", patience=config.transformer_patience),
                      run_dir=run_dir, config={**dataclasses.asdict(config), "strategy": strategy,
                                               "strategy_timing": timing,
                                               "precision_chosen": precision, "precision_timing": precision_timing})
    started = time.perf_counter()
    history = trainer.fit(train_loader, val_loader, epochs=config.transformer_epochs)
    training_seconds = time.perf_counter() - started + cache_seconds
    run_path = trainer.run_path
    best = torch.load(run_path / "checkpoints" / "best.pt", weights_only=True)
    trained.load_state_dict(best["model"])
    import json

    best_info = json.loads((run_path / "checkpoints" / "best.json").read_text())
    best_info["epoch"] = int(round(best_info["step"] / max(1, len(train_loader))))
    say(f"best checkpoint: val macro-F1 {best_info['value']:.4f} after epoch {best_info['epoch']} "
        f"(step {best_info['step']})")
    model.to("cpu").eval()
    lr_steps = [config.transformer_lr * factor(s) for s in range(trainer.global_step)]

    splits = {}
    test_probabilities = test_outputs = None
    # The train split's rows come from a stratified sample the size of the test split: the whole-model
    # forward over every training tweet would cost minutes on a CPU and say little more. With the cached
    # strategy, train and validation rows go through the top alone from their cached bottom features: the
    # same model, without the bottom's forward a second time.
    picked = stratified_rows(train.labels, len(test), config.seed)
    for name in ("train", "validation", "test"):
        key = f"train ({len(picked):,} sampled)" if name == "train" and len(picked) < len(train) else name
        rows = picked if name == "train" else None
        if name in cached:
            probabilities, labels = cached_probabilities(trained, cached[name], data[name].lengths, rows,
                                                         desc=f"predicting {key}")
        else:
            texts = data[name] if rows is None else data[name].subset(rows)
            outputs, labels = predict_outputs(model, texts, desc=f"predicting {key}"), texts.labels
            probabilities = outputs.softmax(dim=-1)
        splits[key] = classification_metrics(labels, probabilities.argmax(dim=-1).numpy(), classes)
        if name == "test":
            test_probabilities, test_outputs = probabilities, outputs
    return TransformerResult(model, strategy, timing, precision, history, lr_steps, best_info, training_seconds,
                             cache_seconds, run_path, splits, test_probabilities, test_outputs)


def _training_precision(config: Any, decisions: Any, device: Any, trained: Any, batch: Any,
                        loss_fn: Any) -> tuple[str, dict[str, Any]]:
    """The transformer's training precision: recorded by the run being resumed, configured, or measured on
    ``batch`` (fp32 off the CPU); said, and recorded in ``decisions``."""
    from torchwork.recipes.sentiment_shared import choose_precision, precision_words

    kept = decisions.get("transformer_precision") if decisions is not None else None
    if isinstance(kept, dict) and kept.get("precision") in ("32", "bf16") and isinstance(kept.get("timing"), dict):
        say(f"precision: {kept['precision']} (recorded by the run being resumed)")
        return kept["precision"], kept["timing"]
    requested = config.transformer_precision if config.transformer_precision != "auto" else config.precision
    precision, timing = choose_precision(requested if device.type == "cpu" else "32", trained, batch, loss_fn,
                                         steps=4)
    if decisions is not None:
        decisions.record("transformer_precision", {"precision": precision, "timing": timing})
    say(precision_words(precision, timing, "training step"))
    return precision, timing


def subword_tokenizer(max_length: int) -> Any:
    """MiniLM's WordPiece tokenizer as an artifact preprocessor."""
    from torchwork.deploy.wordpiece import SubwordTokenizer
    from torchwork.finetune.minilm import minilm_folder

    return SubwordTokenizer.from_file(minilm_folder() / "tokenizer.json", max_length=max_length)


def export_transformer(model: Any, config: Any, artifact: Path, train: Any, validation: Any, test: Any,
                       classes: list[str], kept: dict[str, Any] | None = None, test_outputs: Any = None
                       ) -> dict[str, Any]:
    """ONNX + INT8 (MatMul) with the tokenizer bundled, every variant verified on the whole test split;
    ``kept``: the variant to deploy and the fallback margin a resumed run chose before; ``test_outputs``:
    the model's outputs on the test split, already computed by the evaluation (verify's eager reference,
    checked on the first rows, instead of a second eager pass over the split)."""
    from torchwork.deploy import export

    tokenizer = subword_tokenizer(config.transformer_max_length)
    return export(model.eval(), tokenizer(list(train.texts[:8])), artifact, formats=("onnx",), preprocess=tokenizer,
                  labels=classes, softmax=True, samples=list(test.texts), targets=list(test.labels),
                  sample_outputs=test_outputs,
                  quantize="int8" if config.quantize else None, overwrite=True, strict=False,
                  input_names=("input_ids", "attention_mask"), verify_rounds=5,
                  # agreement with float (README): per-tensor scales 92.7%, per-channel 97.4%, smoothed 98.7%,
                  # with the float fallback 99.1-99.7% (seeds 2 and 0)
                  quantize_per_channel=True, quantize_smoothing=config.int8_smoothing or None,
                  calibration=list(validation.texts[:CALIBRATION_ROWS]),
                  quantize_attention_mask="attention_mask" if config.quantize else None,
                  quantize_fallback_agreement=(config.int8_fallback_agreement or None) if config.quantize else None,
                  quantize_fallback_margin=(kept or {}).get("margin"), deploy=(kept or {}).get("deploy"),
                  # activation scales fixed from the validation tweets: a served answer depends on its request
                  # alone, not on the requests batched with it (benchmarks/deploy_static_int8.py)
                  quantize_activations="static" if config.quantize else "dynamic")


def int8_speed(verify_report: dict[str, Any]) -> dict[str, Any]:
    """Eager against the served INT8 variant (its float fallback included) from the verification table, which
    timed them by the one timing rule (interleaved blocks, each after a pause): items per second at batch 1
    and at the table's throughput batch, and INT8's speed-up.

    >>> rows = {"eager": {"latency_b1_ms": 20.0, "throughput_b64_per_s": 100.0},
    ...         "onnx-int8": {"latency_b1_ms": 5.0, "throughput_b64_per_s": 250.0}}
    >>> int8_speed({"variants": rows, "timing_batches": {"latency": 1, "throughput": 64}})["batch_64"]
    {'eager_per_s': 100.0, 'int8_per_s': 250.0, 'int8_speedup': 2.5}
    """
    rows = verify_report["variants"]
    eager, int8 = rows.get("eager"), rows.get("onnx-int8")
    if not eager or not int8 or "latency_b1_ms" not in int8:
        return {}
    batches = verify_report["timing_batches"]
    return {f"batch_{batches['latency']}": {"eager_per_s": round(1e3 / eager["latency_b1_ms"], 1),
                                            "int8_per_s": round(1e3 / int8["latency_b1_ms"], 1),
                                            "int8_speedup": round(eager["latency_b1_ms"] / int8["latency_b1_ms"], 2)},
            f"batch_{batches['throughput']}": {
                "eager_per_s": round(eager["throughput_b64_per_s"], 1),
                "int8_per_s": round(int8["throughput_b64_per_s"], 1),
                "int8_speedup": round(int8["throughput_b64_per_s"] / eager["throughput_b64_per_s"], 2)}}


def validate_settings(config: Any) -> None:
    """The upper bounds of a SentimentConfig's transformer settings (``check_settings`` has the lower ones)."""
    problems = [text for bad, text in (
        (config.transformer_train_layers > 6, f"transformer_train_layers={config.transformer_train_layers}: "
                                              "MiniLM has 6 layers; train 1 to 6 of them"),
        (config.layer_decay > 1, f"layer_decay={config.layer_decay}: use a number in (0, 1]"),
        (config.warmup >= 1, f"warmup={config.warmup}: the warm-up is a fraction of the steps, in [0, 1)"),
        (not 0 <= config.int8_smoothing <= 1, f"int8_smoothing={config.int8_smoothing}: SmoothQuant's alpha, "
                                              "in (0, 1], or 0 for none"),
        (not 0 <= config.int8_fallback_agreement <= 1, f"int8_fallback_agreement={config.int8_fallback_agreement}"
                                                       ": a share in (0, 1], or 0 for no float fallback"),
        (config.transformer_max_length > 512, f"transformer_max_length={config.transformer_max_length}: "
                                              "MiniLM has 512 positions"),
        (not isinstance(config.device, str) or not config.device, f"device={config.device!r}: use auto, cpu, "
                                                                  "cuda or cuda:N")) if bad]
    if problems:
        raise ConfigError("; ".join(problems) + ".")


def transformer_sections(config: Any, train: Any, validation: Any, test: Any, classes: list[str], run_path: Path,
                         models: dict[str, Any], decisions: Any = None) -> dict[str, Any]:
    """The quickstart's transformer steps (printed as sections 5 and 6); returns what the summary and the
    report need about the served model, and adds it to ``models``."""
    from torchwork.data import format_metrics
    from torchwork.deploy import format_report
    from torchwork.recipes.sentiment_shared import export_threads

    say("\n== 5. Transformer: all-MiniLM-L6-v2 fine-tuned on the tweets")
    result = train_transformer(config, train, validation, test, classes, run_path / "transformer", decisions)
    metrics = result.splits["test"]
    say(format_metrics(metrics))
    ngram = models["ngram"]["macro_f1"]
    say(f"transformer test macro-F1 {metrics['macro_f1']:.4f} vs n-gram {ngram:.4f} "
        f"({100 * (metrics['macro_f1'] - ngram):+.1f} points) vs baseline {models['baseline']['macro_f1']:.4f}")
    models["transformer"] = {"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                             "training_seconds": round(result.training_seconds, 1)}

    say("\n== 6. Export to ONNX with the tokenizer, INT8 MatMul, verification on the whole test split")
    export_threads(config.threads, say)
    artifact = run_path / "artifact"
    kept = decisions.get("transformer_export") if decisions is not None else None
    kept = kept if isinstance(kept, dict) else None
    report = export_transformer(result.model, config, artifact, train, validation, test, classes, kept,
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
            "strategy": result.strategy, "strategy_timing": result.timing,
            "test_probabilities": result.test_probabilities.tolist(), "device": result.timing.get("device", "")}
