"""torch.compile on this CPU, measured the way Trainer(compile="auto") decides, and the C++ runner.

For the digits MLP (64-64-10, batch 64) and the Fashion-MNIST CNN (AdaptiveDepthCNN, 32 channels, 28x28,
batch 64; random images of that shape when Debian's dataset-fashion-mnist is absent), on 1 thread:
- training: ``Trainer(compile="auto")``'s own measurement on the first batch (eager and compiled forward +
  backward, interleaved rounds: medians and spread), the compile seconds, the break-even step against a
  planned 10,000 steps, and the decision it printed;
- inference: ``torchwork verify --cpp`` of an artifact with pt2 (the eager reference), ONNX and pt2-aoti
  (Inductor, ahead of time): latency at batch 1 and throughput at batch 64 of each, the C++ runner's row
  included (its batch-1 latency against Python eager is the ``cpp_latency_ratio``).
Prints one JSON object. About 5 minutes on a quiet 2-core machine (the compiles dominate).
"""

from __future__ import annotations

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


def main() -> None:
    figures: dict = {"threads": 1, "torch": torch.__version__, "planned_steps": PLANNED_EPOCHS}
    with tempfile.TemporaryDirectory() as scratch:
        for name, make in (("digits_mlp", digits), ("fashion_cnn", fashion)):
            model, x, y = make()
            figures[name] = {"training": training(model, x, y), "inference": inference(model, x, y, Path(scratch),
                                                                                       name)}
            print(f"{name} done", file=sys.stderr, flush=True)
    record(figures, indent=1)


if __name__ == "__main__":
    main()
