"""Dynamic against static INT8 activation scales on the fine-tuned MiniLM: independence, agreement, speed.

Usage: python benchmarks/deploy_static_int8.py ARTIFACT [--calibration-rows N] [--rounds R]

ARTIFACT is a transformer artifact written by the sentiment recipe (``torchwork quickstart``: the run folder's
``artifact/``, which holds the float ``model.onnx``, the eager weights and the tokenizer). Both INT8 graphs
are made here from its float graph with the recipe's settings (per-channel weights, SmoothQuant alpha 0.8,
fused attention, the float fallback at 99.3% asked), calibrated on the first N validation tweets (seed 0).

Measured, on the test tweets, for each:
- independence: every test tweet answered alone, in a batch of 31 with random other tweets, and padded to
  128 tokens: rows whose label changed, and the largest probability shift (static: 0 and under 1e-6 wanted);
- agreement of the served answer (INT8 with its float fallback) with float ONNX, and the share re-run in float;
- items per second at batch 32 and 1, eager torch and both INT8 variants (with fallback, as served),
  interleaved rounds on one thread, medians; ratios to eager.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from torchwork.data.datasets import load_dataset
from torchwork.deploy.contents import load_weights
from torchwork.deploy.fallback import fallback_runner, measure_margin
from torchwork.deploy.quantize import quantize_onnx
from torchwork.deploy.runtime import onnx_session, open_runner, softmax
from torchwork.deploy.wordpiece import SubwordTokenizer
from torchwork.finetune.minilm import MiniLMClassifier

torch.set_num_threads(1)
AGREEMENT = 0.993


def feeds_of(tokenizer: SubwordTokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    ids, mask = tokenizer(texts)
    return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}


def independence(run, tokenizer: SubwordTokenizer, texts: list[str]) -> dict[str, float]:
    """Each text alone, among 30 random others, and padded to the tokenizer's limit."""
    rng = random.Random(0)
    alone = np.concatenate([run(feeds_of(tokenizer, [t])) for t in texts])
    batched = []
    for text in texts:
        others = rng.sample(texts, 30)
        place = rng.randrange(31)
        batched.append(run(feeds_of(tokenizer, others[:place] + [text] + others[place:]))[place])
    batched_arr = np.stack(batched)
    padded = []
    for start in range(0, len(texts), 32):
        feed = feeds_of(tokenizer, texts[start:start + 32])
        width = tokenizer.max_length
        feed = {k: np.pad(v, ((0, 0), (0, width - v.shape[1]))) for k, v in feed.items()}
        padded.append(run(feed))
    padded_arr = np.concatenate(padded)
    return {f"{name}_label_changes": int((other.argmax(1) != alone.argmax(1)).sum())
            for name, other in (("batched", batched_arr), ("padded", padded_arr))} | {
        f"{name}_max_probability_shift": float(np.abs(other - alone).max())
        for name, other in (("batched", batched_arr), ("padded", padded_arr))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--calibration-rows", type=int, default=1000)
    parser.add_argument("--test-rows", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tokenizer = SubwordTokenizer.load(args.artifact / "preprocess")
    data = load_dataset("tweets", seed=0)
    validation = list(data.validation.texts[:args.calibration_rows])
    test = list(data.test.texts[:args.test_rows])
    calibration = [feeds_of(tokenizer, validation[i:i + 64]) for i in range(0, len(validation), 64)]
    float_path = args.artifact / "model.onnx"
    exact = open_runner(float_path, "onnx", 1)
    result: dict[str, object] = {"calibration_rows": len(validation), "test_rows": len(test), "threads": 1}
    runners = {}
    with tempfile.TemporaryDirectory() as tmp:
        for activations in ("dynamic", "static"):
            target = Path(tmp) / f"{activations}.onnx"
            started = time.perf_counter()
            quantize_onnx(float_path, target, per_channel=True, smoothing=0.8, calibration=calibration,
                          attention_mask="attention_mask", check_feeds=calibration[:2], activations=activations)
            quantize_s = time.perf_counter() - started
            margin = measure_margin(float_path, target, calibration, AGREEMENT, threads=1)
            int8 = open_runner(target, "onnx", 1)
            served = fallback_runner(int8, exact, margin["margin"]) if margin["margin"] is not None else int8
            runners[activations] = served
            session = onnx_session(target, 1)

            def plain(feed, session=session):
                return softmax(session.run(None, feed)[0])

            def answer(feed, served=served):
                inputs = [torch.from_numpy(feed["input_ids"]), torch.from_numpy(feed["attention_mask"])]
                return softmax(served(inputs)[0].float().numpy())

            float_labels, served_labels = [], []
            for start in range(0, len(test), 32):
                feed = feeds_of(tokenizer, test[start:start + 32])
                float_labels.append(exact([torch.from_numpy(v) for v in feed.values()])[0].argmax(1).numpy())
                served_labels.append(answer(feed).argmax(1))
            agreement = float((np.concatenate(float_labels) == np.concatenate(served_labels)).mean())
            result[activations] = {"quantize_seconds": round(quantize_s, 1), "fallback": margin,
                                   "served_agreement_with_float": round(agreement, 4),
                                   "int8_alone": independence(plain, tokenizer, test[:200]),
                                   "served": independence(answer, tokenizer, test[:200])}
            print(f"{activations}: {json.dumps(result[activations])}", file=sys.stderr, flush=True)
        labels = json.loads((args.artifact / "manifest.json").read_text())["postprocess"]["labels"]
        model = MiniLMClassifier(classes=len(labels))
        model.load_state_dict(load_weights(args.artifact))
        model.eval()

        def eager(inputs):
            with torch.inference_mode():
                return model(*inputs)

        timed = {"eager": eager, **runners}
        for size in (32, 1):
            block = [tuple(tokenizer(test[i:i + size])) for i in range(0, size * 8, size)]
            seconds: dict[str, list[float]] = {name: [] for name in timed}
            for run in timed.values():
                run(block[0])
            for round_index in range(args.rounds):
                order = list(timed)[round_index % 3:] + list(timed)[:round_index % 3]
                for name in order:
                    time.sleep(0.3)  # ONNX Runtime's and OpenMP's threads spin for a while after a call
                    started = time.perf_counter()
                    for inputs in block:
                        timed[name](list(inputs))
                    seconds[name].append((time.perf_counter() - started) / len(block))
            median = {name: statistics.median(v) for name, v in seconds.items()}
            spread = {name: round((max(v) - min(v)) / statistics.median(v), 3) for name, v in seconds.items()}
            result[f"batch_{size}"] = {"items_per_s": {n: round(size / m, 1) for n, m in median.items()},
                                       "speedup_over_eager": {n: round(median["eager"] / m, 2)
                                                              for n, m in median.items() if n != "eager"},
                                       "relative_spread": spread}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
