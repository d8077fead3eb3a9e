"""The sentiment recipe's transformer strategy, chosen by measurement: the encoder fine-tuned whole, or its top
layers trained on cached features of its frozen bottom.

Example:
    >>> strategy_rule([4.0] * 3, [0.1] * 3, [0.1] * 3, trained_steps=200, cache_batches=50)["chosen"]
    'cached'
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from torchwork.errors import ConfigError
from torchwork.recipes.transformer_texts import bottom_module

STRATEGIES = ("auto", "cached", "full")
FULL_BUDGET_S = 300.0  # whole fine-tuning is always affordable under this estimate
FULL_OVER_CACHED = 2.0  # ... and otherwise while it costs at most this many times the cached option


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
    from torchwork.finetune.encoder_model import EncoderTop

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
    freeze(model, *model.frozen_names(split))
    bottom = bottom_module(model, split)
    bottom_times = []
    with torch.inference_mode():
        for _ in range(steps):
            start = time.perf_counter()
            hidden, _ = bottom(ids, mask)
            bottom_times.append(time.perf_counter() - start)
    top_steps = _time_steps(EncoderTop(model, split), (hidden.clone(), mask), target, loss_fn, steps)
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
