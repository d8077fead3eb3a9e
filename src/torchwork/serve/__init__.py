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

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_attributes

# public name -> module that defines it (none of them imports torch, onnxruntime or fastapi on import but app)
_LAZY: dict[str, str] = {
    "ArtifactPredictor": "torchwork.serve.artifact",
    "predictor_from_artifact": "torchwork.serve.artifact",
    "Batcher": "torchwork.serve.batcher",
    "BatchingRule": "torchwork.serve.batching",
    "ServeConfig": "torchwork.serve.config",
    "ModelProcess": "torchwork.serve.model_process",
    "ModelPredictor": "torchwork.serve.predictor",
    "OnnxPredictor": "torchwork.serve.predictor",
    "ServedModel": "torchwork.serve.predictor",
    "TorchPredictor": "torchwork.serve.predictor",
    "configure_threads": "torchwork.serve.predictor",
    "serve": "torchwork.serve.server",
    "create_app": "torchwork.serve.app",  # the only module that imports fastapi
}

__all__ = list(_LAZY)

# Type checkers read the imports (and flag a misspelt name); at run time each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.serve.app import create_app  # noqa: F401
    from torchwork.serve.artifact import ArtifactPredictor, predictor_from_artifact  # noqa: F401
    from torchwork.serve.batcher import Batcher  # noqa: F401
    from torchwork.serve.batching import BatchingRule  # noqa: F401
    from torchwork.serve.config import ServeConfig  # noqa: F401
    from torchwork.serve.model_process import ModelProcess  # noqa: F401
    from torchwork.serve.predictor import (  # noqa: F401
        ModelPredictor,
        OnnxPredictor,
        ServedModel,
        TorchPredictor,
        configure_threads,
    )
    from torchwork.serve.server import serve  # noqa: F401
else:
    __getattr__, __dir__ = lazy_attributes("torchwork.serve", _LAZY, globals())
