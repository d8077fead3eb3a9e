"""What the sentiment recipe's two models share: a stratified subset of a split for quick runs, and the
precision chosen by measurement (and how to say so). The n-gram recipe (:mod:`torchwork.recipes.sentiment`)
and its transformer (:mod:`torchwork.recipes.sentiment_transformer`) both import it; neither imports the
other for it.

Example:
    >>> from torchwork.data import TextDataset
    >>> split = TextDataset(["a", "b", "c", "d"], [0, 0, 1, 1])
    >>> sorted(stratified_subset(split, 2, seed=0).labels)
    [0, 1]
    >>> precision_words("32", {})
    'precision: 32 (as configured)'
"""

from __future__ import annotations

import copy
import time
from typing import Any


def stratified_rows(labels: Any, rows: int, seed: int) -> list[int]:
    """The indices (in order) of a seeded, class-stratified sample of ``rows`` of ``labels`` (all of them
    when ``rows`` is 0 or not fewer)."""
    import numpy as np

    if not rows or rows >= len(labels):
        return list(range(len(labels)))
    rng = np.random.default_rng(seed)
    array = np.asarray(labels)
    picked: list[int] = []
    for label in np.unique(array):
        members = rng.permutation(np.flatnonzero(array == label))
        picked.extend(members[: max(1, round(rows * len(members) / len(array)))].tolist())
    return sorted(picked)


def stratified_subset(split: Any, rows: int, seed: int) -> Any:
    """A seeded, class-stratified subset of a text split (for quick runs)."""
    from torchwork.data import TextDataset

    if not rows or rows >= len(split):
        return split
    picked = stratified_rows(split.labels, rows, seed)
    return TextDataset([split.texts[i] for i in picked], [split.labels[i] for i in picked])


def choose_precision(requested: str, model: Any, batch: Any, loss_fn: Any, steps: int = 8) -> tuple[str, dict]:
    """fp32, the default, unless bf16 autocast is measurably faster for this model on this CPU: at least 10%
    faster at the median, and by more than the timing spread (the interquartile ranges of both, summed), so
    that a busy machine keeps the default instead of flipping between runs. The timing says which rule
    decided (``kept``/``chosen``) and the ``--set`` that pins the choice."""
    import torch

    from torchwork import Trainer
    from torchwork.deploy.choice import spread

    if requested != "auto":
        return requested, {}
    from torchwork.distributed.env import world_from_env

    if world_from_env().is_distributed:
        return "32", {}  # ranks timing separately could choose differently; they must agree
    seconds: dict[str, list[float]] = {"32": [], "bf16": []}
    trainers = {}
    for precision in seconds:
        trial = copy.deepcopy(model)
        trainers[precision] = Trainer(trial, torch.optim.AdamW(trial.parameters()), loss_fn, device="cpu",
                                      precision=precision, guard=False, progress=False, distributed=False,
                                      threads=torch.get_num_threads())  # both timed alike
        trainers[precision].step(batch)  # warm-up
    for _ in range(steps):  # interleaved, so that machine noise hits both alike
        for precision, trainer in trainers.items():
            start = time.perf_counter()
            trainer.step(batch)
            seconds[precision].append(time.perf_counter() - start)
    median = {p: sorted(s)[len(s) // 2] for p, s in seconds.items()}
    noise = spread(seconds["32"]) + spread(seconds["bf16"])
    gain = median["32"] - median["bf16"]
    chosen = "bf16" if median["bf16"] < 0.9 * median["32"] and gain > noise else "32"
    timing: dict[str, Any] = {f"step_ms_{p}": round(1000 * m, 2) for p, m in median.items()}
    timing["spread_ms"] = round(1000 * noise, 2)
    timing["rule"] = ("bf16: >= 10% faster and its gain beyond the spread" if chosen == "bf16" else
                      "fp32 kept: bf16 is not >= 10% faster" if median["bf16"] >= 0.9 * median["32"] else
                      "fp32 kept: bf16's gain is within the timing spread")
    timing["pin"] = f"--set precision={chosen}"
    return chosen, timing


def precision_words(precision: str, timing: dict[str, Any], what: str = "step") -> str:
    """How the precision was decided, for the line the recipe prints."""
    if not timing:
        return f"precision: {precision} (as configured)"
    return (f"precision: {precision} (measured {what}: fp32 {timing['step_ms_32']} ms, bf16 {timing['step_ms_bf16']} "
            f"ms, spread {timing.get('spread_ms', '?')} ms; {timing.get('rule', 'bf16 only when >= 10% faster')}; "
            f"pin it with {timing.get('pin', f'--set precision={precision}')})")


def export_threads(threads: int, say: Any) -> int:
    """The export stage's thread count, chosen afresh (``threads`` 0: for the machine as it is now): the
    training's last choice was made for its steps and its moment (a re-check beside a passing neighbour once
    left a whole export and its timing tables on one thread of an idle 2-core machine)."""
    from torchwork.threads import choose_threads

    return choose_threads(threads or "auto", say=lambda line: say(f"export {line}")).threads
