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

from torchwork.lazy import lazy_package

# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.lazy_package reads them back and each name is imported on first use (none of these modules
# imports torch, onnxruntime or fastapi on import but app, the only one that imports fastapi).
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

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
