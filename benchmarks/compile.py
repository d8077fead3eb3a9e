"""torch.compile on this CPU, measured the way Trainer(compile="auto") decides, and the C++ runner.

For the digits MLP (64-64-10, batch 64) and the Fashion-MNIST CNN (AdaptiveDepthCNN, 32 channels, 28x28,
batch 64; random images of that shape when Debian's dataset-fashion-mnist is absent), on 1 thread:
- training: ``Trainer(compile="auto")``'s own measurement on the first batch (eager and compiled forward +
  backward, interleaved rounds: medians and spread), the compile seconds, the break-even step against a
  planned 10,000 steps, and the decision it printed;
- inference: ``torchwork verify --cpp`` of an artifact with pt2 (the eager reference), ONNX and pt2-aoti
  (Inductor, ahead of time): latency at batch 1 and throughput at batch 64 of each, the C++ runner's row
  included (its batch-1 latency against Python eager is the ``cpp_latency_ratio``).
For the MiniLM top layers (all-MiniLM-L6-v2's real weights from the installed package, its last 2 of 6
layers, mean pooling and a 3-class head, the part the sentiment recipe trains on cached features; inputs
are layer 4's hidden states of 64 real tweets, padded to 48 tokens):
- training: the same ``Trainer(compile="auto")`` measurement on a batch of 32;
- inference: eager, compiled (``torch.compile``, batch dimension dynamic: what ``torchwork serve --compile``
  runs) and ONNX Runtime (the artifact's ``onnx`` variant) timed in interleaved rounds at batch 1 and 32:
  medians, spreads, and the compile seconds.
``--models`` picks some of ``digits_mlp``, ``fashion_cnn`` and ``minilm_top`` (default: all).
Prints one JSON object. About 5 minutes on a quiet 2-core machine (the compiles dominate), plus ~3 for MiniLM.
"""

from __future__ import annotations

import os

# Cold compiles: Inductor's on-disk caches would make a rerun's compile seconds a cache read (measured here:
# the MiniLM top step compiled in 87.1 s cold, 14.5 s from the cache). Set before torch is imported.
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md
from torch import nn

from torchwork import Trainer
from torchwork.deploy import export, verify
from torchwork.engine.compiling import CompileOptions

torch.set_num_threads(1)
BATCH, PLANNED_EPOCHS = 64, 10_000


def digits() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    return model, torch.tensor(data.data / 16.0, dtype=torch.float32), torch.tensor(data.target)


def fashion() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    from torchwork.recipes.models import AdaptiveDepthCNN

    torch.manual_seed(0)
    model = AdaptiveDepthCNN(10, channels=32)
    try:
        from torchwork.data import load_dataset

        test = load_dataset("fashion_mnist").test
        rows = [test[i] for i in range(512)]
        return model, torch.stack([x for x, _ in rows]), torch.tensor([int(y) for _, y in rows])
    except Exception as error:  # the Debian package is missing: same shapes, random pixels
        print(f"fashion-mnist unavailable ({error}); random 28x28 images", file=sys.stderr)
        return model, torch.rand(512, 1, 28, 28), torch.randint(0, 10, (512,))


class StopAfterOneStep:
    def on_step_end(self, trainer, logs):
        trainer.should_stop = True

    def on_epoch_end(self, trainer, logs):
        trainer.should_stop = True


def training(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict:
    batches = [(x[:BATCH], y[:BATCH])]  # one batch per epoch, PLANNED_EPOCHS planned: auto weighs 10,000 steps
    trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3), nn.CrossEntropyLoss(), device="cpu",
                      progress=False, compile=CompileOptions("auto", rounds=7), callbacks=[StopAfterOneStep()])
    started = time.perf_counter()
    trainer.fit(batches, epochs=PLANNED_EPOCHS)
    decision = dict(trainer._compiler.decision or {})
    decision["measurement_seconds"] = round(time.perf_counter() - started, 1)
    return decision


def inference(model: nn.Module, x: torch.Tensor, y: torch.Tensor, root: Path, name: str) -> dict:
    model.eval()
    started = time.perf_counter()
    report = export(model, x[:8], root / name, formats=("pt2", "onnx", "pt2-aoti"), verify_rounds=3)
    export_seconds = time.perf_counter() - started
    verified = verify(root / name, model=model, inputs=x, targets=y, rounds=15, threads=1, cpp=True,
                      trust=("native",))
    rows = {variant: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                      if k in ("max_abs", "latency_b1_ms", "latency_ratio", "throughput_b64_per_s",
                               "throughput_ratio", "build_seconds", "build_cached")}
            for variant, row in verified["variants"].items()}
    aoti_compile = report["parity"]["formats"]["pt2-aoti"]["export"].get("compile_seconds")
    return {"export_seconds": round(export_seconds, 1), "aoti_compile_seconds": aoti_compile, "variants": rows,
            "cpp_latency_ratio": rows["cpp"].get("latency_ratio")}


MINILM_LENGTH, MINILM_BATCH = 48, 32


def minilm_top() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """MiniLMTop above layer 4 (its bottom frozen), and layer 4's hidden states of real tweets."""
    from torchwork.data import load_dataset
    from torchwork.finetune.minilm import MiniLMClassifier, MiniLMTop, minilm_tokenizer

    torch.manual_seed(0)
    model = MiniLMClassifier(classes=3)
    start = model.num_layers - 2
    for name, parameter in model.named_parameters():
        parameter.requires_grad = name.startswith("classifier") or any(
            name.startswith(f"encoder.encoder.layer.{i}.") for i in range(start, model.num_layers))
    tweets = load_dataset("tweets", seed=0).test
    texts, labels = tweets.texts[:64], torch.tensor(tweets.labels[:64])
    tokens = minilm_tokenizer(max_length=MINILM_LENGTH, pad_to=MINILM_LENGTH)(texts)
    with torch.inference_mode():
        hidden, mask = model.bottom(tokens["input_ids"], tokens["attention_mask"], layers=start)
    return MiniLMTop(model, start), (hidden.clone(), mask.clone()), labels


def minilm_training(top: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor], y: torch.Tensor) -> dict:
    batch = ((inputs[0][:MINILM_BATCH], inputs[1][:MINILM_BATCH]), y[:MINILM_BATCH])
    trainable = [p for p in top.parameters() if p.requires_grad]
    trainer = Trainer(top, torch.optim.AdamW(trainable, lr=2e-4), nn.CrossEntropyLoss(), device="cpu",
                      progress=False, threads=1, compile=CompileOptions("auto", rounds=7),
                      callbacks=[StopAfterOneStep()])
    started = time.perf_counter()
    trainer.fit([batch], epochs=PLANNED_EPOCHS)
    decision = dict(trainer._compiler.decision or {})
    decision["measurement_seconds"] = round(time.perf_counter() - started, 1)
    return decision


def minilm_inference(top: nn.Module, inputs: tuple[torch.Tensor, torch.Tensor], root: Path) -> dict:
    from torchwork.deploy import load_artifact
    from torchwork.deploy.choice import spread
    from torchwork.deploy.runtime import torch_runner
    from torchwork.deploy.verification import interleaved_samples
    from torchwork.engine.compiling import compile_batch_dynamic

    top.eval()
    export(top, (inputs[0][:8], inputs[1][:8]), root / "minilm", formats=("pt2", "onnx"), dynamic_length=False,
           verify_rounds=2)
    runners = {"eager": torch_runner(top), "compiled": torch_runner(compile_batch_dynamic(top)),
               "onnxruntime": load_artifact(root / "minilm", "onnx", threads=1).run_model}
    out: dict = {}
    started = time.perf_counter()
    for size in (1, MINILM_BATCH):  # compiles here: the batch-1 graph, then the dynamic-batch one
        runners["compiled"]([t[:size] for t in inputs])
    out["compile_seconds"] = round(time.perf_counter() - started, 1)
    for size in (1, MINILM_BATCH):
        batch = [t[:size] for t in inputs]
        expected = runners["eager"](batch)[0]
        out[f"max_abs_b{size}"] = {name: float((run(batch)[0] - expected).abs().max()) for name, run in runners.items()
                                   if name != "eager"}
        calls = {name: (lambda run=run, batch=batch: run(batch)) for name, run in runners.items()}
        samples = interleaved_samples(calls, rounds=15, repeat=20 if size == 1 else 3)
        medians = {name: statistics.median(values) for name, values in samples.items()}
        out[f"batch_{size}"] = {name: {"ms": round(medians[name] * 1e3, 3),
                                       "spread_ms": round(spread(samples[name]) * 1e3, 3),
                                       "ratio_to_eager": round(medians[name] / medians["eager"], 3)}
                                for name in runners}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits_mlp,fashion_cnn,minilm_top",
                        help="comma-separated: digits_mlp, fashion_cnn, minilm_top")
    chosen = parser.parse_args().models.split(",")
    figures: dict = {"threads": 1, "torch": torch.__version__, "planned_steps": PLANNED_EPOCHS}
    with tempfile.TemporaryDirectory() as scratch:
        for name, make in (("digits_mlp", digits), ("fashion_cnn", fashion)):
            if name not in chosen:
                continue
            model, x, y = make()
            figures[name] = {"training": training(model, x, y), "inference": inference(model, x, y, Path(scratch),
                                                                                       name)}
            print(f"{name} done", file=sys.stderr, flush=True)
        if "minilm_top" in chosen:
            top, inputs, y = minilm_top()
            figures["minilm_top"] = {"training": minilm_training(top, inputs, y)}
            torch._dynamo.reset()  # the inference graphs are compiled afresh, as a server would
            figures["minilm_top"]["inference"] = minilm_inference(top, inputs, Path(scratch))
            print("minilm_top done", file=sys.stderr, flush=True)
    record(figures, indent=1)


if __name__ == "__main__":
    main()
