"""The memory of the quickstart's feature cache: one tensor padded to the longest tweet of the split (the
old way) against the ragged cache (each length-bucketed batch only as wide as its longest row), each built
in a fresh process on the same real tweets with the recipe's own loader, MiniLM's bottom (layers 0-3).

Prints one JSON object: per layout, the peak resident memory of the process (ru_maxrss), its growth while
caching, and the bytes the cache holds; and the ratios padded / ragged. --tweets sets how many training
tweets (default 6,000; the quickstart caches about 30k train and 3.8k validation tweets).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

CHILD = """
import json, resource, sys, torch
torch.set_num_threads(1)
from torchwork.data import load_dataset
from torchwork.finetune import cache_features, freeze
from torchwork.finetune.minilm import MiniLMClassifier
from torchwork.recipes.buckets import pad_batch
from torchwork.recipes.transformer_texts import TokenTexts, bottom_module, length_loader, subword_tokenizer
tweets, ragged = int(sys.argv[1]), sys.argv[2] == "ragged"
train = load_dataset("tweets").train
data = TokenTexts(train.texts[:tweets], train.labels[:tweets], subword_tokenizer(64))
model = MiniLMClassifier(classes=3).eval()
freeze(model, "encoder.embeddings", *[f"encoder.encoder.layer.{i}" for i in range(4)])
bottom = bottom_module(model, 4)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cache = cache_features(bottom, length_loader(data, data.lengths, 64, False, 0, pad_batch), progress=False, ragged=ragged)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
parts = [t for b in cache.batches for t in b] if ragged else list(cache.features)
print(json.dumps({"peak_rss_mb": round(peak / 1024), "growth_mb": round((peak - before) / 1024),
                  "cache_mb": round(sum(t.numel() * t.element_size() for t in parts) / 2**20)}))
"""


def measure(tweets: int, layout: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tweets), layout], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tweets", type=int, default=6000)
    args = parser.parse_args()
    padded, ragged = measure(args.tweets, "padded"), measure(args.tweets, "ragged")
    record({"tweets": args.tweets, "padded": padded, "ragged": ragged,
            "cache_ratio": round(padded["cache_mb"] / max(1, ragged["cache_mb"]), 2),
            "growth_ratio": round(padded["growth_mb"] / max(1, ragged["growth_mb"]), 2)})


if __name__ == "__main__":
    main()
