"""Frozen-prefix feature caching: run the frozen bottom of a model once per dataset, train the top on it.

When the bottom is frozen (and in eval mode) its outputs never change, so computing them every epoch is
wasted work: on a CPU that is the difference between minutes and hours. ``cache_features`` runs
``bottom`` over the data once (in order, eval mode, inference mode) and returns a dataset of
``(features, target)`` pairs; the top trains on it with the usual ``Trainer``. Features may be a
tensor, a tuple or a dict of tensors (the top is then called ``top(*features)`` / ``top(**features)``);
sequences of different lengths are zero-padded to the longest; batch tuple features with
``collate_fn=collate_cached`` so that they reach the top as a tuple (PyTorch's default collate makes a
list). With ``path=`` the cache is kept on disk
(safetensors) with a fingerprint of the bottom's weights and the data size, and reused only when both
match. With ``precision="bf16"`` the bottom runs under bfloat16 autocast (about 1.8x faster than fp32 for
MiniLM's bottom on a CPU with AVX-512 BF16) and its floating outputs are stored as float32, so the top sees
the dtype it would see from an fp32 cache; the choice is part of the fingerprint. ``storage="bf16"`` (ragged
caches) keeps floating features in bfloat16 and reads each row back as float32: half the memory, for a top
that trains under bf16 autocast anyway.

Example:
    >>> import torch
    >>> from torch import nn
    >>> bottom = nn.Linear(4, 3).requires_grad_(False)
    >>> data = [(torch.randn(4), 0), (torch.randn(4), 1), (torch.randn(4), 1)]
    >>> cached = cache_features(bottom, data, batch_size=2, progress=False)
    >>> len(cached), cached[0][0].shape, cached.targets.tolist()
    (3, torch.Size([3]), [0, 1, 1])
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from torchwork.errors import ConfigError

TRIM_EVERY = 32  # batches between two returns of the heap's free pages while caching (release_memory)

if TYPE_CHECKING:  # pragma: no cover
    from torch.utils.data import DataLoader, Dataset


class CachedFeatures:
    """A map-style dataset of cached ``(features, target)`` pairs (``torch.utils.data.Dataset`` protocol)."""

    def __init__(self, features: Any, targets: Any, fingerprint: str = "") -> None:
        self.features, self.targets, self.fingerprint = features, targets, fingerprint
        first = _first(features)
        if first.shape[0] != targets.shape[0]:
            raise ConfigError(f"{first.shape[0]} cached feature rows but {targets.shape[0]} targets.")

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return _index(self.features, index), self.targets[index]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the cache as safetensors (atomically), with its fingerprint in the metadata."""
        from safetensors.torch import save

        from torchwork.files import atomic_write

        tensors = {f"features.{k}": v.contiguous() for k, v in _flatten(self.features).items()}
        tensors["targets"] = self.targets.contiguous()
        layout = "tensor" if _is_tensor(self.features) else ("dict" if isinstance(self.features, Mapping) else "tuple")
        meta = {"fingerprint": self.fingerprint, "layout": layout}
        with atomic_write(path) as handle:
            handle.write(save(tensors, metadata=meta))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CachedFeatures:
        from safetensors import safe_open

        with safe_open(str(path), "pt") as handle:
            meta = handle.metadata() or {}
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        parts = {k[len("features."):]: v for k, v in tensors.items() if k.startswith("features.")}
        layout = meta.get("layout", "tensor")
        if layout == "tensor":
            features: Any = parts[""]
        elif layout == "dict":
            features = parts
        else:
            features = tuple(parts[str(i)] for i in range(len(parts)))
        return cls(features, tensors["targets"], meta.get("fingerprint", ""))


class RaggedCachedFeatures(CachedFeatures):
    """Cached features kept as the bottom returned them, batch by batch, each batch only as wide as its own
    longest row (``cache_features(ragged=True)``). A row keeps its batch's width, so rows of two batches may
    differ in length: collate them with a function that pads (the sentiment recipe's ``trim_cached``).

    Against one tensor padded to the longest row of the whole split, this stores what the bottom computed
    (length-bucketed batches: about the rows' own lengths) and never holds two copies at once (no
    ``torch.cat``): on 6,000 real tweets (MiniLM's layer-4 features, batches of 64 by length) the cache
    measured 2.0x smaller and the process grew 3.2x less while caching
    (benchmarks/finetune_feature_cache_memory.py). ``read_as``: the dtype each row's floating tensors are
    read back as (``storage="bf16"`` keeps them in bfloat16 and reads them as float32: half again).
    """

    def __init__(self, batches: list[Any], targets: Any, fingerprint: str = "", read_as: Any = None) -> None:
        import bisect

        self.batches, self.targets, self.fingerprint, self.read_as = batches, targets, fingerprint, read_as
        self._starts = [0]
        for batch in batches:
            self._starts.append(self._starts[-1] + int(_first(batch).shape[0]))
        self._bisect = bisect.bisect_right
        if self._starts[-1] != targets.shape[0]:
            raise ConfigError(f"{self._starts[-1]} cached feature rows but {targets.shape[0]} targets.")

    @property
    def features(self) -> Any:
        raise ConfigError("a ragged feature cache has no single features tensor: index its rows (cache[i]) or "
                          "read cache.batches.")

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} of a cache of {len(self)} rows")
        batch = self._bisect(self._starts, index) - 1
        row = _index(self.batches[batch], index - self._starts[batch])
        return (row if self.read_as is None else _cast_floating(row, self.read_as)), self.targets[index]

    def save(self, path: str | os.PathLike[str]) -> None:
        raise ConfigError("cache_features(ragged=True) keeps the cache in memory only; drop path= or ragged=.")


def collate_cached(batch: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """``default_collate`` that keeps tuple features a tuple (``Trainer`` calls ``top(*features)``)."""
    from torch.utils.data import default_collate

    features, targets = default_collate(batch)
    return (tuple(features) if isinstance(features, list) else features), targets


def cache_features(bottom: Any, data: Dataset[Any] | Sequence[Any] | DataLoader[Any], *, batch_size: int = 256, device: str = "cpu",
                   path: str | os.PathLike[str] | None = None, progress: bool | None = None,
                   desc: str = "caching features", precision: str = "32", ragged: bool = False,
                   storage: str = "32") -> CachedFeatures:
    """Run the frozen ``bottom`` once over ``data`` (``(inputs, target)`` items or a non-shuffling loader).

    Args:
        bottom: a module (or a function of the inputs) whose parameters are all frozen.
        data: a dataset of ``(inputs, target)`` pairs, or a DataLoader yielding such batches in order.
        batch_size: batch size when ``data`` is a dataset.
        device: where ``bottom`` runs.
        path: keep the cache in this file and reuse it when the weights and data size match.
        progress: show a progress bar (default: when stderr is a terminal).
        precision: ``"32"`` or ``"bf16"`` (the bottom under bfloat16 autocast, features stored as float32):
            cache in the precision the top trains in.
        ragged: keep each batch's features as the bottom returned them (:class:`RaggedCachedFeatures`),
            not padded to the longest row of all; in memory only (no ``path``).
        storage: ``"32"`` or ``"bf16"`` (with ``ragged``: floating features kept in bfloat16, half the
            memory, and every row read back as float32): for a top that trains under bf16 autocast, whose
            matrix products round their inputs to bfloat16 anyway.
    """
    import torch

    from torchwork.engine.batches import call_model
    from torchwork.engine.devices import move_to_device
    from torchwork.engine.progress import ProgressBar

    if batch_size < 1:
        raise ConfigError(f"cache_features(batch_size={batch_size}) must be >= 1.")
    if precision not in ("32", "bf16"):
        raise ConfigError(f"cache_features(precision={precision!r}): use '32' or 'bf16'.")
    if ragged and path is not None:
        raise ConfigError("cache_features(ragged=True) keeps the cache in memory only; drop path= or ragged=.")
    if storage not in ("32", "bf16") or (storage == "bf16" and not ragged):
        raise ConfigError(f"cache_features(storage={storage!r}): use '32', or 'bf16' with ragged=True.")
    modules = [bottom] if isinstance(bottom, torch.nn.Module) else []
    trainable = [n for m in modules for n, p in m.named_parameters() if p.requires_grad]
    if trainable:
        raise ConfigError(f"cache_features: the bottom has {len(trainable)} trainable parameter(s) (e.g. "
                          f"{trainable[:3]}); cached features would go stale as they train. Freeze the bottom "
                          "first (torchwork.finetune.freeze).")
    sampler = getattr(data, "sampler", None)
    if isinstance(sampler, torch.utils.data.RandomSampler):
        raise ConfigError("cache_features needs the data in a fixed order: pass the dataset, or a DataLoader "
                          "with shuffle=False (shuffle the cached dataset instead).")
    if isinstance(data, torch.utils.data.DataLoader):
        loader = data
    else:  # a Dataset or a plain sequence of items: DataLoader indexes either
        loader = torch.utils.data.DataLoader(cast("Dataset[Any]", data), batch_size=batch_size, shuffle=False,
                                             collate_fn=collate_cached)
    fingerprint = _fingerprint(modules, len(loader.dataset) if isinstance(loader.dataset, Sized) else None,
                               precision)
    if path is not None and Path(path).is_file():
        cached = CachedFeatures.load(path)
        if cached.fingerprint == fingerprint:
            return cached
    target_device = torch.device(device)
    modes = [m.training for module in modules for m in module.modules()]
    for module in modules:
        module.to(target_device).eval()
    outputs, targets = [], []
    bar = ProgressBar(len(loader) if hasattr(loader, "__len__") else None, desc=desc, enabled=progress)
    try:
        with torch.inference_mode(), torch.autocast(target_device.type, dtype=torch.bfloat16,
                                                    enabled=precision == "bf16"):
            for batch in loader:
                if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                    raise ConfigError("cache_features needs (inputs, target) batches.")
                inputs, target = batch
                if isinstance(inputs, list):  # what default_collate makes of a tuple
                    inputs = tuple(inputs)
                output = call_model(bottom, move_to_device(inputs, target_device))
                output = move_to_device(output, torch.device("cpu"))
                outputs.append(_cast_floating(output, torch.bfloat16) if storage == "bf16" else _float32(output))
                if len(outputs) % TRIM_EVERY == 0:
                    release_memory(collect=False)
                targets.append(torch.as_tensor(target))
                if bar.enabled:
                    bar.update(int(targets[-1].shape[0]) if targets[-1].ndim else 1)
    finally:
        bar.close()
        for module in modules:
            for m, mode in zip(module.modules(), modes):
                m.training = mode
    release_memory(collect=False)
    if not outputs:
        raise ConfigError("cache_features: the data yielded no batches.")
    all_targets = torch.cat([t.reshape(-1) if t.ndim == 0 else t for t in targets])
    read_as = torch.float32 if storage == "bf16" else None
    cached = (RaggedCachedFeatures(outputs, all_targets, fingerprint, read_as) if ragged
              else CachedFeatures(_concat(outputs), all_targets, fingerprint))
    if path is not None:
        cached.save(path)
    return cached


def release_memory(collect: bool = True) -> None:
    """Collect garbage (``collect``), then hand the C heap's free pages back to the system (glibc's
    ``malloc_trim``; a no-op where the C library has none, as on macOS or musl).

    Freed blocks of a few MB (a forward's activations, a batch's float32 features once kept in bf16, a
    tokenizer's encodings) come from the heap, not from their own mapping, and glibc keeps their pages once
    they are freed, between the blocks still in use: caching 3,000 real tweets' layer-4 features in bf16
    (70 MB) grew the process by 442 MB, 164 MB after the trim; ``cache_features`` trims every
    ``TRIM_EVERY`` batches. After the 36,003 tweets were tokenized in one ``encode_batch`` the process held
    530 MB, 302 MB after the trim.
    """
    import ctypes
    import gc

    if collect:
        gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):
        pass


def _fingerprint(modules: list[Any], size: int | None, precision: str = "32") -> str:
    """A checksum of the bottom's weights and buffers, of the data size and, for bf16, the precision (an fp32
    cache written before ``precision`` existed keeps its fingerprint)."""
    import torch

    digest = hashlib.blake2b(digest_size=16)
    for module in modules:
        for name, tensor in module.state_dict().items():
            data = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(name.encode())
            if data.numel():
                digest.update(data.view(torch.uint8).numpy().tobytes())
    digest.update(json.dumps(size).encode())
    if precision != "32":
        digest.update(precision.encode())
    return digest.hexdigest()


def _float32(output: Any) -> Any:
    """bfloat16 tensors of ``output`` (a tensor, tuple or dict) as float32; everything else as it is."""
    import torch

    return _cast_floating(output, torch.float32, only=torch.bfloat16)


def _cast_floating(output: Any, dtype: Any, only: Any = None) -> Any:
    """The floating tensors of ``output`` (a tensor, tuple or dict; those of dtype ``only`` when given) as
    ``dtype``; everything else as it is."""
    if _is_tensor(output):
        cast = output.is_floating_point() and output.dtype != dtype and only in (None, output.dtype)
        return output.to(dtype) if cast else output
    if isinstance(output, Mapping):
        return {k: _cast_floating(v, dtype, only) for k, v in output.items()}
    if isinstance(output, (tuple, list)):
        return type(output)(_cast_floating(v, dtype, only) for v in output)
    return output


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _first(features: Any) -> Any:
    if _is_tensor(features):
        return features
    return next(iter(features.values())) if isinstance(features, Mapping) else features[0]


def _index(features: Any, index: int) -> Any:
    if _is_tensor(features):
        return features[index]
    if isinstance(features, Mapping):
        return {k: v[index] for k, v in features.items()}
    return tuple(v[index] for v in features)


def _flatten(features: Any) -> dict[str, Any]:
    if _is_tensor(features):
        return {"": features}
    if isinstance(features, Mapping):
        return dict(features)
    return {str(i): v for i, v in enumerate(features)}


def _concat(outputs: list[Any]) -> Any:
    """Join batches along dim 0, zero-padding dim 1 of sequences to the longest."""
    import torch

    first = outputs[0]
    if isinstance(first, torch.Tensor):
        # Into one preallocated tensor, batch by batch: padded copies of every batch and then torch.cat would
        # hold the cache three times at the peak (the batches, their padded copies, the result).
        shape = list(first.shape)
        shape[0] = sum(o.shape[0] for o in outputs)
        if first.ndim >= 2:
            shape[1] = max(o.shape[1] for o in outputs)
        joined = torch.zeros(shape, dtype=first.dtype)
        row = 0
        for output in outputs:
            region = joined[row:row + output.shape[0]]
            (region[:, :output.shape[1]] if output.ndim >= 2 else region).copy_(output)
            row += output.shape[0]
        return joined
    if isinstance(first, Mapping):
        return {k: _concat([o[k] for o in outputs]) for k in first}
    if isinstance(first, (tuple, list)):
        return tuple(_concat([o[i] for o in outputs]) for i in range(len(first)))
    raise ConfigError(f"cache_features: the bottom returned a {type(first).__name__}; return tensors.")
