"""Serving over HTTP: FastAPI + uvicorn, request schemas from the model's input, dynamic batching.

Importing this package is light: torch, onnxruntime and fastapi load only when a predictor or the app is
built.

Example:
    >>> import torch
    >>> from torchwork.serve import ServeConfig, TorchPredictor, create_app
    >>> app = create_app(TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,)), ServeConfig())
    >>> app.title
    'torchwork serve'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchwork.serve.artifact import ArtifactPredictor, predictor_from_artifact
from torchwork.serve.batcher import Batcher
from torchwork.serve.batching import BatchingRule
from torchwork.serve.config import ServeConfig
from torchwork.serve.model_process import ModelProcess
from torchwork.serve.predictor import (
    ModelPredictor,
    OnnxPredictor,
    ServedModel,
    TorchPredictor,
    configure_threads,
)
from torchwork.serve.server import serve

if TYPE_CHECKING:  # pragma: no cover
    from torchwork.serve.app import create_app

__all__ = ["ArtifactPredictor", "Batcher", "BatchingRule", "ModelPredictor", "ModelProcess", "OnnxPredictor", "ServedModel",
           "ServeConfig", "TorchPredictor", "configure_threads", "create_app", "predictor_from_artifact", "serve"]


def __getattr__(name: str) -> Any:
    if name == "create_app":  # the only name whose module imports fastapi
        from torchwork.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'torchwork.serve' has no attribute {name!r}")
