"""Length-bucketed batches of token ids: texts of similar length together, padded to the batch's longest.

Tweets tokenized for MiniLM are 29 tokens at the median and 81 at most: padded at random, a batch of 32 pads
to ~44; sorted by length, to ~25. :class:`LengthBuckets` is a ``batch_sampler``: it sorts the indices by
length (ties and near-ties broken at random each epoch when ``shuffle``), cuts them into batches and
shuffles the order of the batches, so that every epoch sees other neighbours and another order.
:func:`pad_batch` collates ``(ids, label)`` items into ``((input_ids, attention_mask), labels)``;
:func:`trim_cached` trims cached ``(hidden, mask)`` features to the longest row of the batch.

Example:
    >>> buckets = LengthBuckets([5, 1, 4, 2, 3, 6], batch_size=2, shuffle=False)
    >>> list(buckets)
    [[1, 3], [4, 2], [0, 5]]
    >>> (ids, mask), labels = pad_batch([([101, 7, 102], 0), ([101, 102], 2)])
    >>> ids.tolist(), mask.tolist(), labels.tolist()
    ([[101, 7, 102], [101, 102, 0]], [[1, 1, 1], [1, 1, 0]], [0, 2])
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from torchwork.errors import ConfigError


class LengthBuckets:
    """A ``batch_sampler`` of similar-length batches (see the module docstring)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, *, shuffle: bool = True, seed: int = 0) -> None:
        if batch_size < 1:
            raise ConfigError(f"batch_size={batch_size}: use >= 1.")
        if not len(lengths):
            raise ConfigError("LengthBuckets got no lengths (an empty split).")
        self.lengths, self.batch_size, self.shuffle, self.seed = list(lengths), batch_size, shuffle, seed
        self.epoch = 0

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle the next iteration as epoch ``epoch`` (the Trainer calls it, so that a resumed run sees
        the order the uninterrupted one saw, whatever iterated the loader before)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        import numpy as np

        lengths = np.asarray(self.lengths, dtype=np.float64)
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch])
            self.epoch += 1
            order = np.argsort(lengths + rng.uniform(0, 1, len(lengths)), kind="stable")  # near-ties at random
        else:
            order = np.argsort(lengths, kind="stable")
        batches = [order[i:i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return iter(batches)


# Batches only predicted (validation, evaluation) are padded to a multiple of this many columns. Every new
# width costs memory that stays: oneDNN keeps what it builds per shape, and buffers of many different sizes
# leave the C heap fragmented. MiniLM over the 56 widths 9-64, measured as resident growth (6 Dec): the whole
# model in float32 at batch 64 +338 MB exact, +90 MB rounded to 8; the top two layers in bf16 at batch 128
# +720 MB exact, +99 MB rounded. The padding is masked, so predictions do not change beyond rounding; the
# training batches keep their exact widths (the step's cost, and the run's numbers, stay as they were).
PREDICT_WIDTH_MULTIPLE = 8


def _rounded_up(width: int, multiple: int) -> int:
    return -(-width // multiple) * multiple


def pad_batch(items: Sequence[tuple[Sequence[int], int]], pad_id: int = 0,
              multiple: int = 1) -> tuple[tuple[Any, Any], Any]:
    """``[(token ids, label), ...]`` -> ``((input_ids, attention_mask), labels)``, padded to the longest (rounded
    up to a multiple of ``multiple`` columns)."""
    import torch

    width = _rounded_up(max(len(ids) for ids, _ in items), multiple)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, (ids, _) in enumerate(items):
        input_ids[row, :len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        mask[row, :len(ids)] = 1
    return (input_ids, mask), torch.tensor([int(label) for _, label in items], dtype=torch.long)


def _widen(row: Any, width: int) -> Any:
    """``row`` (positions first) zero-padded to ``width`` positions."""
    import torch

    if row.shape[0] == width:
        return row
    return torch.nn.functional.pad(row, [0, 0] * (row.ndim - 1) + [0, width - row.shape[0]])


def trim_cached(items: Sequence[tuple[tuple[Any, Any], Any]], multiple: int = 1) -> tuple[tuple[Any, Any], Any]:
    """Collate cached ``((hidden, mask), label)`` items, dropping the padding columns no row of the batch uses
    (rows of a ragged cache, of different widths, are padded to the widest first); with ``multiple``, the
    width is rounded up to a multiple of that many columns (zero-padded, masked)."""
    import torch

    used = max(int(m.sum()) for (_, m), _ in items)
    width = _rounded_up(max(used, 1), multiple)
    longest = max(width, *(m.shape[0] for (_, m), _ in items))  # a ragged cache's rows keep their batch's width
    hidden = torch.stack([_widen(h, longest) for (h, _), _ in items])
    mask = torch.stack([_widen(m, longest) for (_, m), _ in items])
    return (hidden[:, :width], mask[:, :width]), torch.stack([torch.as_tensor(t) for _, t in items])


def trim_cached_for_prediction(items: Sequence[tuple[tuple[Any, Any], Any]]) -> tuple[tuple[Any, Any], Any]:
    """:func:`trim_cached` with the width rounded up to :data:`PREDICT_WIDTH_MULTIPLE` (a validation loader's
    ``collate_fn``)."""
    return trim_cached(items, PREDICT_WIDTH_MULTIPLE)
