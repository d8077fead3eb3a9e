"""What an artifact bundles beside its model files: weights, example inputs, held-out samples, the
preprocessor. Each is read through the typed manifest, from paths checked to stay inside the artifact.

Example:
    >>> from torchwork.deploy import load_weights
    >>> model.load_state_dict(load_weights("artifact"))   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torchwork.deploy.manifest import SAMPLES_JSON, SAMPLES_TENSORS, Manifest, SamplesEntry, read_manifest
from torchwork.deploy.tensors import as_input_tuple, load_tensors, save_tensors
from torchwork.deploy.trust import check_inside, resolve_class, safe_member
from torchwork.errors import ConfigError, ExportError


def load_weights(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The eager ``state_dict`` stored in an artifact (safetensors: no pickle involved).

    Example:
        >>> model.load_state_dict(load_weights("artifact"))   # doctest: +SKIP
    """
    root = Path(directory)
    return weights_of(root, read_manifest(root))


def weights_of(root: Path, manifest: Manifest) -> dict[str, Any]:
    """The weights of an artifact whose manifest was read already."""
    return load_tensors(safe_member(root, manifest.weights, "the weights entry"))


def load_examples(root: Path, manifest: Manifest) -> tuple[Any, ...]:
    """The example inputs the export was made with (``input_0``, ``input_1``... of the examples file, one per
    model input); :class:`~torchwork.errors.ExportError` when one is missing."""
    tensors = load_tensors(safe_member(root, manifest.examples, "the examples entry"))
    names = [f"input_{i}" for i in range(len(manifest.inputs))]
    missing = [name for name in names if name not in tensors]
    if missing:
        held = ", ".join(sorted(tensors)[:8]) or "nothing"
        raise ExportError(f"artifact {root}: {manifest.examples} lacks {', '.join(missing[:8])} (the model takes "
                          f"{len(names)} input(s); the file holds {held}): it is damaged. Export the model again.")
    return tuple(tensors[name] for name in names)


def save_samples(root: Path, samples: Any, targets: Any) -> SamplesEntry:
    """Write held-out raw inputs (texts or tensors) and their targets; returns the manifest entry."""
    import torch

    from torchwork.files import write_json

    target_list = None
    if targets is not None:
        target_list = [int(t) for t in (targets.tolist() if hasattr(targets, "tolist") else targets)]
    if isinstance(samples, (list, tuple)) and samples and all(isinstance(s, str) for s in samples):
        if target_list is not None and len(target_list) != len(samples):
            raise ConfigError(f"{len(samples)} samples but {len(target_list)} targets.")
        write_json(root / SAMPLES_JSON, {"texts": list(samples), "targets": target_list})
        return SamplesEntry(SAMPLES_JSON, "texts", len(samples), target_list is not None)
    tensors = as_input_tuple(samples, "samples")
    count = tensors[0].shape[0] if tensors[0].ndim else 1
    if target_list is not None and len(target_list) != count:
        raise ConfigError(f"{count} samples but {len(target_list)} targets.")
    named = {f"input_{i}": t for i, t in enumerate(tensors)}
    if target_list is not None:
        named["targets"] = torch.tensor(target_list, dtype=torch.long)
    save_tensors(root / SAMPLES_TENSORS, named)
    return SamplesEntry(SAMPLES_TENSORS, "tensors", count, target_list is not None, inputs=len(tensors))


def load_samples(root: Path, manifest: Manifest) -> tuple[Any, Any] | None:
    """``(raw inputs, targets or None)`` bundled at export, or None when the artifact has none."""
    import torch

    entry = manifest.samples
    if entry is None:
        return None
    path = safe_member(root, entry.file, "the samples entry")
    if entry.kind == "texts":
        data = json.loads(path.read_text(encoding="utf-8"))
        targets = data.get("targets")
        return list(data["texts"]), (torch.tensor(targets) if targets is not None else None)
    tensors = load_tensors(path)
    inputs = tuple(tensors[f"input_{i}"] for i in range(int(entry.inputs or 1)))
    return (inputs[0] if len(inputs) == 1 else inputs), tensors.get("targets")


def check_listed(root: Path, directory: Path, files: Mapping[str, Any]) -> None:
    """Everything under ``directory`` is a regular file inside ``root`` that the file table lists (so its
    checksum is known) before a preprocessor's ``load`` opens any of it."""
    for folder, subfolders, names in os.walk(directory):  # symlinked folders are listed, never entered
        for name in sorted(subfolders + names):
            path = Path(folder) / name
            relative = path.relative_to(root).as_posix()
            if name in subfolders and not path.is_symlink():
                continue
            check_inside(root, path, relative)
            if relative not in files:
                raise ExportError(f"artifact {root}: {relative} is not in the manifest's file table, so its "
                                  "checksum is unknown; it was added after export. Remove it or re-export the model.")


def load_preprocess(root: Path, manifest: Manifest, trust: Iterable[str] = ()) -> Any:
    """The artifact's preprocessor (``Class.load(root / "preprocess")``), or None when it has none."""
    entry = manifest.preprocess
    if entry is None:
        return None
    cls = resolve_class(entry.class_spec, trust)
    directory = safe_member(root, entry.dir, "the preprocess entry", directory=True)
    check_listed(root, directory, manifest.files)
    try:
        return cls.load(directory)
    except Exception as error:
        raise ExportError(f"artifact {root}: {entry.class_spec}.load({directory}) failed: "
                          f"{type(error).__name__}: {error}. The preprocess files are damaged or were written "
                          "by another version: re-export the model.") from error
