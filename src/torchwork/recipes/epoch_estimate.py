"""An epoch's seconds, estimated before training from a few timed steps.

What makes a naive estimate wrong, and what this one does about it:

* **Precision.** The Trainer runs the forward under the precision's autocast (bf16 is ~1.5x faster than
  float32 on this project's CPUs); the steps here are timed under the same autocast.
* **First sight of a shape.** oneDNN builds its kernels for each new input shape on first use, and length-
  bucketed batches come in dozens of widths: a step on a width not seen before costs more than the same step
  again. Each sampled batch is timed twice: the second time is the steady step, the difference the one-off
  cost of a new shape, charged once per distinct batch shape of the epoch (on the first epoch; the mean over
  ``epochs`` is what is compared with the measured mean).
* **Validation** is timed on the validation loader's own batches (their size and widths), not scaled from a
  training batch.

Example:
    >>> sorted(batch_shapes([[0, 1], [2, 3], [4]], [5, 9, 9, 9, 3]))
    [(1, 3), (2, 9)]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any


def batch_shapes(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> set[tuple[int, int]]:
    """The distinct ``(rows, width)`` of ``batches`` padded to their longest row (``lengths`` per row)."""
    return {(len(batch), max(lengths[i] for i in batch)) for batch in batches}


def _batches_of(loader: Any) -> list[list[int]]:
    """The index batches the loader's batch sampler gives next, without moving a shuffling sampler on."""
    sampler = loader.batch_sampler
    epoch = getattr(sampler, "epoch", None)
    batches = [list(batch) for batch in sampler]
    if epoch is not None:
        sampler.epoch = epoch  # LengthBuckets counts its iterations: training must see its own first shuffle
    return batches


def _collated(loader: Any, batch: Sequence[int], device: Any) -> tuple[tuple[Any, ...], Any]:
    inputs, target = loader.collate_fn([loader.dataset[i] for i in batch])
    return tuple(x.to(device) for x in inputs), target.to(device)


def _twice(run: Any, *args: Any) -> tuple[float, float]:
    """(first, second) seconds of ``run(*args)`` called twice in a row."""
    times = []
    for _ in range(2):
        started = time.perf_counter()
        run(*args)
        times.append(time.perf_counter() - started)
    return times[0], times[1]


def _shapes_or_none(loader: Any, batches: list[list[int]]) -> set[tuple[int, int]] | None:
    lengths = getattr(loader.batch_sampler, "lengths", None)
    return batch_shapes(batches, lengths) if lengths is not None else None


def epoch_estimate(module: Any, train_loader: Any, val_loader: Any, loss_fn: Any, device: Any, precision: str,
                   epochs: int, batches: int = 8) -> dict[str, float]:
    """Seconds of a training epoch (``epoch_s``: the mean over ``epochs``, validation included), of a steady
    step (``step_s``), of the first epoch (``first_epoch_s``), and the one-off cost of a new batch shape
    (``new_shape_s``), timed on the epoch's first ``batches`` batches and three validation batches. A training
    step is forward and backward without the update; the loader's shuffle, the RNG and the weights are left as
    they were (the gradients are cleared)."""
    import torch

    from torchwork.engine.modes import evaluating
    from torchwork.engine.precision import resolve_precision

    plan = resolve_precision(precision, device)
    train_batches, val_batches = _batches_of(train_loader), _batches_of(val_loader)
    module = module.to(device).train()
    firsts, steadies, seen = [], [], set()

    def step(inputs: tuple[Any, ...], target: Any) -> None:
        with plan.autocast():
            loss = loss_fn(module(*inputs), target)
        loss.backward()

    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for batch in train_batches[:batches]:
            inputs, target = _collated(train_loader, batch, device)
            first, steady = _twice(step, inputs, target)
            shape = tuple(inputs[0].shape[:2])
            if shape not in seen:
                seen.add(shape)
                firsts.append(first - steady)
            steadies.append(steady)
        picked = [val_batches[len(val_batches) * k // 6] for k in (1, 3, 5)]
        val_times = []
        with evaluating(module, plan):
            for batch in picked:
                inputs, _ = _collated(val_loader, batch, device)
                val_times.append(_twice(module, *inputs)[1])
    module.zero_grad(set_to_none=True)
    step_s = statistics.mean(steadies)
    new_shape_s = max(0.0, statistics.median(firsts))
    shapes = _shapes_or_none(train_loader, train_batches)
    new_shapes = len(shapes) if shapes is not None else len(seen)
    val_s = statistics.mean(val_times) * len(val_batches)
    first_epoch_s = step_s * len(train_batches) + val_s + new_shape_s * new_shapes
    epoch_s = first_epoch_s - new_shape_s * new_shapes * (1 - 1 / max(1, epochs))
    return {"step_s": step_s, "epoch_s": epoch_s, "first_epoch_s": first_epoch_s, "new_shape_s": new_shape_s,
            "batch_shapes": float(new_shapes), "validation_s": val_s}
