"""Class imbalance: loss weights and a balanced sampler (the metrics that show every class are in
:mod:`torchwork.data.metrics`).

Example:
    >>> from torchwork.data.balance import class_weights
    >>> [round(w, 4) for w in class_weights([0, 0, 0, 1]).tolist()]
    [0.6667, 2.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from torchwork.data.metrics import class_ids
from torchwork.errors import ConfigError, DataError
from torchwork.finite import check_count, is_finite_number
from torchwork.quoting import quote_value
from torchwork.seeding import check_seed

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.utils.data import WeightedRandomSampler

# Draws of one epoch: torch's sampler makes them all at once, an int64 tensor and a list of Python ints (about
# 40 bytes a draw), so 10**9 (the recipes' MAX_ROWS) is already past most machines' memory.
MAX_SAMPLES = 10**9


def _counts(labels: Any, num_classes: int | None) -> np.ndarray:
    array = class_ids(labels)
    if array.size == 0:
        raise DataError("no labels given: class balance needs the training labels (e.g. dataset.labels).")
    n = num_classes if num_classes is not None else int(array.max()) + 1
    if array.max() >= n:
        raise DataError(f"label {array.max()} does not fit num_classes={n}.")
    return np.bincount(array, minlength=n)


def class_weights(labels: Any, num_classes: int | None = None, power: float = 1.0) -> torch.Tensor:
    """Loss weights ``(N / count) ** power``, normalized so that the average *sample* weight is 1.

    With ``power=1`` these equal scikit-learn's ``compute_class_weight("balanced")``.
    Pass them as ``nn.CrossEntropyLoss(weight=class_weights(train.labels))``. ``power=0.5`` is the milder
    inverse square root. A class absent from ``labels`` gets weight 0 (and a clear error if that is all).
    Compute them from the training split only.
    """
    import torch

    if not is_finite_number(power) or power < 0:
        raise ConfigError(f"power={quote_value(power)} must be a finite number >= 0 (1 = inverse frequency, 0 = no "
                          "weighting).")
    counts = _counts(labels, num_classes).astype(np.float64)
    present = counts > 0
    weights = np.zeros_like(counts)
    weights[present] = (counts.sum() / counts[present]) ** power
    weights *= counts.sum() / (weights * counts).sum()  # mean weight over the samples is 1
    return torch.tensor(weights, dtype=torch.float32)


def balanced_sampler(labels: Any, num_samples: int | None = None, seed: int = 0,
                     replacement: bool = True) -> WeightedRandomSampler:
    """A seeded ``WeightedRandomSampler`` that draws every class equally often on average.

    Use it instead of ``shuffle=True`` (``loader(..., balance=True)`` does this). An epoch has
    ``num_samples`` draws (default: the dataset size), with replacement, so minority rows repeat.
    """
    import torch
    from torch.utils.data import WeightedRandomSampler

    if num_samples is not None:  # an int, as the sampler takes it (not numpy's int64)
        num_samples = check_count(num_samples, "num_samples", 1, MAX_SAMPLES,
                                  " (draws an epoch), or None for one per label")
    check_seed(seed)
    if not isinstance(replacement, bool):
        raise ConfigError(f"replacement={quote_value(replacement)} must be True or False.")
    array = class_ids(labels)
    counts = _counts(array, None)
    draws = len(array) if num_samples is None else num_samples
    if not replacement and draws > len(array):
        raise ConfigError(f"num_samples={draws} draws without replacement from {len(array)} labels: pass "
                          f"num_samples <= {len(array)} or replacement=True.")
    per_sample = 1.0 / counts[array]
    generator = torch.Generator().manual_seed(seed)
    # A list of Python floats (float64, as torch makes of it) is the sequence the sampler documents.
    return WeightedRandomSampler(per_sample.astype(np.float64).tolist(),
                                 draws, replacement=replacement, generator=generator)
