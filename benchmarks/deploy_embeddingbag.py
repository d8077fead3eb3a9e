"""EmbeddingBag vs Embedding + mean, exported to ONNX and run in ONNX Runtime at batch 64.

Two text classifiers with the same weights and the same outputs (EmbeddingBag(mode="mean") over a
(batch, length) tensor of ids is the mean of the embeddings): both exported with torchwork.deploy.export
(ONNX, parity-checked at several batch sizes and lengths), then timed in one process, interleaved, 1 thread, batch 64 x 32 tokens.
Prints one JSON object: median milliseconds per batch for each (ONNX Runtime and eager) and the ratio
EmbeddingBag / Embedding+mean in ONNX Runtime (the issue measured about 12x), plus the ONNX ops of each.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn

from torchwork.deploy import export, load_artifact
from torchwork.deploy.formats import onnx_summary
from torchwork.deploy.verification import interleaved_seconds

torch.set_num_threads(1)
VOCAB, DIM, BATCH, LENGTH, ROUNDS = 20_000, 64, 64, 32, 30


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, DIM, mode="mean")
        self.classifier = nn.Linear(DIM, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.bag(ids))


class MeanOfEmbeddings(nn.Module):
    def __init__(self, bag: Bag) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, DIM)
        self.classifier = nn.Linear(DIM, 2)
        self.load_state_dict({"embedding.weight": bag.bag.weight, "classifier.weight": bag.classifier.weight,
                              "classifier.bias": bag.classifier.bias})

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embedding(ids).mean(dim=1))


def main() -> dict:
    torch.manual_seed(0)
    bag = Bag().eval()
    mean = MeanOfEmbeddings(bag).eval()
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(bag(ids), mean(ids))  # same outputs
    calls, ops = {}, {}
    with tempfile.TemporaryDirectory() as root:
        for name, model in (("embeddingbag", bag), ("embedding_mean", mean)):
            out = Path(root) / name
            export(model, ids[:8], out, formats=("onnx",), threads=1)
            onnx = load_artifact(out, "onnx", threads=1)
            calls[f"{name}_onnxruntime"] = lambda p=onnx: p(ids)
            calls[f"{name}_eager"] = lambda m=model: m(ids)
            ops[name] = onnx_summary(out / "model.onnx")["ops"]
        with torch.no_grad():
            seconds = interleaved_seconds(calls, ROUNDS, repeat=5)
    ms = {k: round(v * 1e3, 4) for k, v in seconds.items()}
    return {
        "batch": BATCH, "length": LENGTH, "threads": 1, "ms_per_batch": ms,
        "onnxruntime_ratio_embeddingbag_over_embedding_mean": round(
            seconds["embeddingbag_onnxruntime"] / seconds["embedding_mean_onnxruntime"], 2),
        "eager_ratio_embeddingbag_over_embedding_mean": round(
            seconds["embeddingbag_eager"] / seconds["embedding_mean_eager"], 2),
        "onnx_ops": ops,
    }


if __name__ == "__main__":
    record(main())
