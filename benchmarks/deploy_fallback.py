"""What INT8's float fallback costs, as served now and as it was: on a fine-tuned transformer artifact.

Usage: python benchmarks/deploy_fallback.py ARTIFACT [--dataset tweets] [--rows 1920] [--rounds 5]
       [--threads 2]

Before: the unsure rows ran again at the batch's width, in a float session with the INT8 session's thread
count. Now (``load_artifact``'s runner, what ``verify`` and ``torchwork serve`` run): cut to their own
longest (:func:`torchwork.deploy.fallback.trimmed_to_longest`), in a one-thread float session
(``torchwork.deploy.loaded.FALLBACK_THREADS``).

ARTIFACT is a transformer artifact whose INT8 variant has a float fallback (``torchwork fit`` or
``torchwork quickstart``: the run folder's ``artifact/``). The test texts of ``--dataset`` (seed 0) are
tokenized by the artifact's own preprocessor in batches of 64, in order, each padded to its own longest (as
``verify`` times them). Measured in the same process, interleaved blocks (each runner times every batch once
a round, the order rotating), medians over the rounds:
- items per second of eager PyTorch (the artifact's MiniLM rebuilt from its weights), float ONNX, INT8
  alone, INT8 with the fallback before and now, and each one's ratio to eager;
- the share of rows run again, the batch's width and the cut width (tokens), and whether the two fallbacks
  give the same labels (the largest probability difference between them).
Prints one JSON object (benchmarks/results.py).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from results import record

from torchwork.data.datasets import load_dataset
from torchwork.deploy import load_artifact, read_manifest
from torchwork.deploy.fallback import fallback_runner, margins, trimmed_to_longest
from torchwork.deploy.loaded import padded_inputs
from torchwork.deploy.runtime import open_runner, softmax

BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--dataset", default="tweets")
    parser.add_argument("--rows", type=int, default=1920, help="test rows timed (30 batches of 64)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.rows < BATCH or args.rounds < 3 or args.threads < 1:
        parser.error("--rows must be >= 64, --rounds >= 3, --threads >= 1")
    torch.set_num_threads(args.threads)
    manifest = read_manifest(args.artifact)
    entry = manifest.variants["onnx-int8"].fallback
    if entry is None or "padding_mask" not in entry:
        parser.error(f"{args.artifact}'s INT8 variant has no float fallback with a padding mask: export it again")
    mask_index, padded = padded_inputs(args.artifact, manifest, entry["padding_mask"])
    served = load_artifact(args.artifact, "onnx-int8", threads=args.threads)
    texts = list(load_dataset(args.dataset, seed=0).test.texts[:args.rows])
    batches = [served.inputs_for(texts[i:i + BATCH]) for i in range(0, len(texts) - BATCH + 1, BATCH)]
    int8 = open_runner(args.artifact / manifest.variants["onnx-int8"].file, "onnx", args.threads)
    exact = open_runner(args.artifact / manifest.variants["onnx"].file, "onnx", args.threads)
    runners = {"eager": eager_runner(args.artifact, manifest), "float onnx": exact, "int8 alone": int8,
               "int8 + fallback, before": fallback_runner(int8, exact, entry["margin"]),
               "int8 + fallback, now": served.run_model}
    figures: dict[str, object] = {"artifact": str(args.artifact), "dataset": args.dataset, "batches": len(batches),
                                  "batch": BATCH, "threads": args.threads, "rounds": args.rounds,
                                  "margin": entry["margin"], **rerun_shape(batches, int8, entry["margin"], mask_index,
                                                                           padded)}
    figures["same_labels"], figures["largest_probability_difference"] = compare(
        batches, runners["int8 + fallback, before"], runners["int8 + fallback, now"])
    seconds = timed(runners, batches, args.rounds)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    rows = BATCH * len(batches)
    figures["items_per_s"] = {name: round(rows / m, 1) for name, m in median.items()}
    figures["against_eager"] = {name: round(median["eager"] / m, 3) for name, m in median.items()}
    figures["relative_spread"] = {name: round((max(v) - min(v)) / statistics.median(v), 3)
                                  for name, v in seconds.items()}
    figures["now_over_before"] = round(median["int8 + fallback, before"] / median["int8 + fallback, now"], 3)
    figures["fallback_cost"] = {name: round(median[name] / median["int8 alone"] - 1, 3)
                                for name in ("int8 + fallback, before", "int8 + fallback, now")}
    record(figures)


def eager_runner(artifact: Path, manifest):
    """The artifact's MiniLM classifier in PyTorch, from its weights (what ``verify`` calls eager)."""
    from torchwork.deploy.contents import load_weights
    from torchwork.finetune.minilm import MiniLMClassifier

    if manifest.model.get("class") != "torchwork.finetune.minilm.MiniLMClassifier":
        raise SystemExit(f"{artifact} holds a {manifest.model.get('class')}, not the MiniLM classifier this "
                         "benchmark rebuilds in PyTorch")
    model = MiniLMClassifier(classes=len(manifest.postprocess.labels))
    model.load_state_dict(load_weights(artifact))
    model.eval()
    return lambda inputs: [model(*inputs)]


def rerun_shape(batches, int8, margin, mask_index, padded) -> dict[str, float]:
    """The share of rows the fallback runs again, and their width before and after the cut (means)."""
    rerun, widths, cut = 0, [], []
    for inputs in batches:
        unsure = torch.from_numpy(margins(int8(list(inputs))[0].float().numpy()) <= margin).nonzero().flatten()
        rerun += len(unsure)
        if len(unsure):
            rows = [t[unsure] for t in inputs]
            widths.append(rows[0].shape[1])
            cut.append(trimmed_to_longest(rows, mask_index, padded)[0].shape[1])
    return {"rows_rerun": round(rerun / (BATCH * len(batches)), 4),
            "rerun_width_mean": round(float(np.mean(widths)), 1) if widths else 0.0,
            "cut_width_mean": round(float(np.mean(cut)), 1) if cut else 0.0}


def compare(batches, before, after) -> tuple[bool, float]:
    same, largest = True, 0.0
    for inputs in batches:
        a = softmax(before(list(inputs))[0].float().numpy())
        b = softmax(after(list(inputs))[0].float().numpy())
        same = same and bool((a.argmax(1) == b.argmax(1)).all())
        largest = max(largest, float(np.abs(a - b).max()))
    return same, largest


def timed(runners, batches, rounds: int) -> dict[str, list[float]]:
    """Seconds per pass over ``batches`` for each runner, one pass a round each, the order rotating."""
    names = list(runners)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for run in runners.values():
        run(list(batches[0]))  # warm
    for round_index in range(rounds):
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:
            time.sleep(0.3)  # ONNX Runtime's and OpenMP's threads spin for a while after a call
            started = time.perf_counter()
            with torch.inference_mode():
                for inputs in batches:
                    runners[name](list(inputs))
            seconds[name].append(time.perf_counter() - started)
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()),
              flush=True)
    return seconds


if __name__ == "__main__":
    main()
