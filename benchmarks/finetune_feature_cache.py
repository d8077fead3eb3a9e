"""Frozen-prefix feature caching with the real MiniLM on real tweets, measured in one run on this machine.

MiniLM's embeddings and layers 0-3 are frozen; the top two layers, pooling and a 3-class head train.
Prints one JSON object:
- epoch_s_full: one training epoch that runs the frozen bottom on every batch (what training without a
  cache does every epoch);
- cache_s: running the frozen bottom once over the same tweets (torchwork.finetune.cache_features);
- epoch_s_cached: one training epoch of the top on the cached layer-4 features;
- epoch_speedup: epoch_s_full / epoch_s_cached; break_even_epochs: after how many epochs caching pays off;
- same_first_loss: both paths give the same first-batch loss (the cache holds the bottom's exact outputs).
Settings: 512 train tweets, batch 32, padded to the longest tweet, 1 thread (--tweets, --threads to change).
"""

from __future__ import annotations

import argparse
import time

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tweets", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from torchwork.data import load_dataset
    from torchwork.finetune import cache_features, collate_cached, freeze
    from torchwork.finetune.minilm import MiniLMClassifier, MiniLMTop, minilm_tokenizer

    torch.manual_seed(0)
    tweets = load_dataset("tweets").train
    texts = [tweets[i][0] for i in range(args.tweets)]
    labels = torch.tensor([int(tweets[i][1]) for i in range(args.tweets)])
    tokens = minilm_tokenizer(pad_to=None)(texts)
    model = MiniLMClassifier(classes=3, dropout=0.0)
    freeze(model, "encoder.embeddings", "encoder.encoder.layer.[0-3]")
    split = 4

    class Bottom(nn.Module):
        def forward(self, input_ids, attention_mask):
            return model.bottom(input_ids, attention_mask, layers=split)

    def batches():
        for i in range(0, args.tweets, 32):
            yield (tokens["input_ids"][i:i + 32], tokens["attention_mask"][i:i + 32]), labels[i:i + 32]

    def train_epoch(forward, data) -> tuple[float, float]:
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
        first = None
        started = time.perf_counter()
        for inputs, target in data:
            loss = nn.functional.cross_entropy(forward(*inputs), target)
            first = float(loss.detach()) if first is None else first
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return time.perf_counter() - started, first

    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()  # no dropout: both paths compute the same function
    epoch_full, loss_full = train_epoch(lambda ids, mask: model(ids, mask), batches())
    model.load_state_dict(state)

    started = time.perf_counter()
    items = [((tokens["input_ids"][i], tokens["attention_mask"][i]), labels[i]) for i in range(args.tweets)]
    cached = cache_features(Bottom(), items, batch_size=32, progress=False)
    cache_s = time.perf_counter() - started
    top = MiniLMTop(model, start=split)
    loader = torch.utils.data.DataLoader(cached, batch_size=32, collate_fn=collate_cached)
    epoch_cached, loss_cached = train_epoch(lambda hidden, mask: top(hidden, mask), loader)
    record({
        "tweets": args.tweets, "threads": args.threads, "padded_to": int(tokens["input_ids"].shape[1]),
        "epoch_s_full": round(epoch_full, 2), "cache_s": round(cache_s, 2), "epoch_s_cached": round(epoch_cached, 2),
        "epoch_speedup": round(epoch_full / epoch_cached, 2),
        "break_even_epochs": round(cache_s / max(epoch_full - epoch_cached, 1e-9), 2),
        "same_first_loss": abs(loss_full - loss_cached) < 1e-4})


if __name__ == "__main__":
    main()
