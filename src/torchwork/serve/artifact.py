"""Serve an exported artifact: a thin adapter from ``torchwork.deploy.load_artifact`` to a :class:`Predictor`.

The artifact folder holds ``manifest.json`` (what the input is, label names) beside the exported model;
``load_artifact(folder)`` returns a callable from raw items (preprocessing included) to outputs. This module
only reads the manifest's input and output description and wraps that callable.

Manifest fields read (others are ignored):
- ``input.kind``: ``"text"`` or ``"tensor"``; ``input.shape``: the batched input shape, e.g.
  ``[null, 64]`` (the first, batch dimension is dropped; ``null`` is a free dimension);
  ``input.dtype`` (default ``"float32"``);
- ``labels`` (or ``output.labels``): class names of a classifier; ``output.kind``: ``"logits"`` (default)
  or ``"probabilities"``.

Example (not run here: it needs an exported artifact):
    predictor = predictor_from_artifact("artifacts/sentiment")
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError, ExportError
from torchwork.serve.predictor import ModelPredictor


class ArtifactPredictor(ModelPredictor):
    """Wrap ``predict = load_artifact(folder)``: raw items in, one output row per item out."""

    def __init__(self, predict: Callable[[Any], Any], manifest: dict[str, Any], name: str = "artifact") -> None:
        spec = manifest.get("input") or {}
        output = manifest.get("output") or {}
        kind = spec.get("kind", "tensor")
        shape = spec.get("shape")
        super().__init__(kind=kind, item_shape=None if shape is None or kind == "text" else tuple(shape[1:]),
                         dtype=spec.get("dtype", "float32"),
                         labels=manifest.get("labels", output.get("labels")),
                         preprocess=(lambda items: (items,)) if kind == "text" else None,
                         output=output.get("kind", "logits"), name=name)
        self._predict = predict

    def _forward(self, inputs: tuple[Any, ...]) -> Any:
        import numpy as np

        out = self._predict(inputs[0])
        if isinstance(out, (tuple, list)) and out and not isinstance(out[0], (int, float)):
            out = out[0]
        return out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)


def predictor_from_artifact(directory: str | os.PathLike[str]) -> ArtifactPredictor:
    """The predictor of an artifact folder written by ``torchwork.deploy.export``."""
    try:
        deploy = importlib.import_module("torchwork.deploy")
    except ImportError as error:
        raise ConfigError(f"serving an artifact needs torchwork.deploy, which cannot be imported here "
                          f"({error}); use --factory module:function to serve your own predictor.") from None
    folder = Path(directory)
    manifest_path = folder / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise ExportError(f"{manifest_path} does not exist: {folder} is not an exported artifact. Export "
                          "one with torchwork.deploy.export(model, example_inputs, out_dir).") from None
    except (OSError, ValueError) as error:
        raise ExportError(f"{manifest_path} cannot be read as JSON ({error}); export the artifact again.") from None
    if not isinstance(manifest, dict):
        raise ExportError(f"{manifest_path} holds {type(manifest).__name__}, not an object; export again.")
    return ArtifactPredictor(deploy.load_artifact(folder), manifest, name=folder.name)
