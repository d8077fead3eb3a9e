"""Held-out rows for the parity pass, preprocessed a chunk at a time in order of length, as a server pads them.

Preprocessing the whole held-out split at once pads every row to the longest of all of them: 3,600 tweets
through the MiniLM tokenizer came out as 3,600 x 64 tokens although the mean tweet has 29, so every variant
spent most of its parity pass on padding. Here the rows are ordered by their preprocessed size (each row
preprocessed alone) and each chunk is preprocessed on its own, so a chunk is padded only to its own longest
row; the outputs come back in that order, and the targets are put in it too. Only rows whose preprocessed
sizes differ are ordered (texts, sequences); fixed-size rows keep the single padded batch.

Example:
    >>> import torch
    >>> def pad(texts):   # a stand-in tokenizer: one id per character, padded to the longest
    ...     longest = max(len(t) for t in texts)
    ...     return torch.tensor([[ord(c) for c in t] + [0] * (longest - len(t)) for t in texts])
    >>> held_out = length_ordered(["a" * n for n in (5, 1, 3, 2)], pad, None, size=2)
    >>> [tuple(chunk[0].shape) for chunk in held_out.chunks], held_out.order
    ([(2, 2), (2, 5)], [1, 3, 2, 0])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.deploy import progress
from torchwork.deploy.runtime import Runner
from torchwork.deploy.tensors import as_input_tuple, check_inputs
from torchwork.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class OrderedRows:
    """The chunks' input tuples, and the raw rows' indices in the order the chunks hold them."""

    chunks: list[tuple[Any, ...]]
    order: list[int]

    @property
    def count(self) -> int:
        return len(self.order)


def length_ordered(raw: Any, preprocess: Callable[[Any], Any], schema: Any, size: int) -> OrderedRows | None:
    """``raw`` rows in chunks of ``size``, shortest first, each preprocessed on its own; None where that
    gains nothing (one chunk, rows of one size) or a chunk does not fit the model's input ``schema``."""
    if not isinstance(raw, (list, tuple)) or len(raw) <= size:
        return None
    try:
        sizes = [_preprocessed_size(preprocess, row) for row in raw]
    except (ConfigError, TypeError, ValueError):
        return None
    if len(set(sizes)) == 1:
        return None
    order = sorted(range(len(raw)), key=sizes.__getitem__)  # stable: rows of one size keep their order
    chunks = []
    for start in range(0, len(order), size):
        chunk = as_input_tuple(preprocess([raw[i] for i in order[start:start + size]]), "inputs")
        if schema is not None:
            try:
                chunk = check_inputs(chunk, schema, any_batch=True)
            except ConfigError:
                return None
        chunks.append(chunk)
    return OrderedRows(chunks, order)


def _preprocessed_size(preprocess: Callable[[Any], Any], row: Any) -> int:
    return sum(int(t.numel()) for t in as_input_tuple(preprocess([row]), "inputs"))


def run_ordered(run: Runner, rows: OrderedRows, chunked: Callable[[Runner, tuple[Any, ...]], list[Any]]) -> list[Any]:
    """Every chunk through ``chunked(run, chunk)`` (which fills a static batch), the outputs joined along
    dim 0; ValueError when the chunks' outputs differ beyond it (per-token outputs of chunks padded alike
    only), so the caller goes back to one padded batch."""
    import torch

    parts: list[Sequence[Any]] = []
    done = 0
    for chunk in rows.chunks:
        parts.append(chunked(run, chunk))
        done += int(chunk[0].shape[0])
        progress.rows(done)
    joined = []
    for index in range(len(parts[0])):
        pieces = [part[index] for part in parts]
        if len({tuple(p.shape[1:]) for p in pieces}) != 1:
            raise ValueError(f"output {index} has a shape that follows the padding: {[tuple(p.shape) for p in pieces]}")
        joined.append(torch.cat(pieces))
    return joined
