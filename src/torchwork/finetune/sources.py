"""Reading a pretrained state dict: a safetensors file, a torch checkpoint, a mapping, or a folder.

Nothing is unpickled: torch files are read with ``weights_only=True``. A folder may hold one weights
file, a Hugging Face layout (``model.safetensors``, sharded ``*.safetensors`` with an index, or
``pytorch_model.bin``), or a torchwork run's ``checkpoints/``.

Example:
    >>> import torch
    >>> state, where = read_state_dict({"w": torch.zeros(2)})
    >>> list(state), where
    (['w'], 'a state dict')
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchwork.errors import CheckpointError

# Files a folder may hold, most preferred first.
_FOLDER_FILES = ("model.safetensors", "pytorch_model.bin", "model.pt", "model.pth", "best.pt", "last.pt")
_CONTAINER_KEYS = ("model", "state_dict", "model_state_dict", "module")


def read_state_dict(source: Any) -> tuple[dict[str, Any], str]:
    """``(state dict of tensors, a description of where it came from)``."""
    import torch

    if isinstance(source, torch.nn.Module):
        return dict(source.state_dict()), f"a {type(source).__name__}'s state dict"
    if isinstance(source, Mapping):
        return _tensors_of(source, "the state dict given"), "a state dict"
    if not isinstance(source, (str, os.PathLike)):
        raise CheckpointError(f"source must be a file, a folder or a state dict, got {type(source).__name__}.")
    path = Path(source)
    if path.is_dir():
        path = _weights_file_in(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file. Pass a .safetensors or torch checkpoint file, a folder "
                              "holding one, or a state dict.")
    if path.name.endswith(".index.json"):
        return _read_sharded(path), str(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return dict(load_file(str(path))), str(path)
        except Exception as error:  # safetensors raises its own error types for damaged headers
            raise CheckpointError(f"{path}: not a readable safetensors file ({error}).") from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # an UnpicklingError for anything that is not plain tensors and containers
        raise CheckpointError(
            f"{path}: cannot be read with torch.load(weights_only=True) ({str(error).splitlines()[0]}). "
            "Only tensors and plain containers are read; save weights with torch.save(model.state_dict()) "
            "or as safetensors.") from None
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"{path} holds a {type(loaded).__name__}, not a state dict.")
    return _tensors_of(loaded, str(path)), str(path)


def _tensors_of(mapping: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The tensors of a state dict, or of the state dict inside a checkpoint (``{"model": ...}``)."""
    import torch

    for key in _CONTAINER_KEYS:
        inner = mapping.get(key)
        if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
            return dict(inner)
    tensors = {k: v for k, v in mapping.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        keys = sorted(repr(k)[:60] for k in list(mapping)[:1000])  # keys of any type (1 and "a" do not sort)
        raise CheckpointError(f"{where} holds no tensors (keys: {', '.join(keys[:8]) or 'none'}).")
    return tensors


def _weights_file_in(folder: Path) -> Path:
    for name in _FOLDER_FILES:
        if (folder / name).is_file():
            return folder / name
    for pattern in ("*.safetensors.index.json", "*.safetensors", "checkpoints/best.pt", "*.pt", "*.pth", "*.bin"):
        found = sorted(folder.glob(pattern))
        if len(found) == 1 or (found and pattern.endswith("index.json")):
            return found[0]
        if len(found) > 1:
            raise CheckpointError(f"{folder} holds several weight files ({', '.join(p.name for p in found[:5])}): "
                                  "pass the one to load.")
    raise CheckpointError(f"{folder} holds no weights file (looked for {', '.join(_FOLDER_FILES)}, "
                          "*.safetensors, *.pt, *.pth, *.bin).")


MAX_INDEX_BYTES = 64 << 20  # a Hugging Face index lists keys and shard names; larger is not one


def _read_sharded(index: Path) -> dict[str, Any]:
    """The tensors of a sharded safetensors folder, every shard named by the index checked first: a plain
    file name inside the folder (no absolute path, no ``..``, no symlink out, a regular file)."""
    from safetensors.torch import load_file

    from torchwork.paths import why_unsafe

    if index.stat().st_size > MAX_INDEX_BYTES:
        raise CheckpointError(f"{index}: {index.stat().st_size} bytes is too large for a shard index.")
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # bad JSON or UTF-8, absurd numbers or nesting
        raise CheckpointError(f"{index} is not a readable shard index ({str(error)[:120]}).") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index} has no 'weight_map' of tensor name -> shard file name; it is not a "
                              "Hugging Face shard index.")
    state: dict[str, Any] = {}
    for shard in sorted(set(weight_map.values())):
        path = index.parent / shard
        plain = shard and not os.path.isabs(shard) and "\\" not in shard and ".." not in Path(shard).parts
        problem = None if plain else "is not a file name inside the folder"
        problem = problem or why_unsafe(index.parent, path) or (None if path.is_file() else "is missing")
        if problem:
            raise CheckpointError(f"{index}: the shard {shard[:200]!r} {problem}; a shard index names files "
                                  "beside it. The folder is damaged or forged: download it again.")
        try:
            state.update(load_file(str(path)))
        except Exception as error:  # safetensors raises its own error types for damaged headers
            raise CheckpointError(f"{path}: not a readable safetensors file ({error}).") from None
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise CheckpointError(f"{index} lists {len(missing)} tensor(s) its shards do not hold "
                              f"(e.g. {missing[:3]}); the folder is incomplete: download it again.")
    return state
