"""Deployment artifacts: export, verify parity, quantize.

``export`` writes a self-contained artifact directory (see :mod:`torchwork.deploy.manifest` for the
layout) and refuses any format that disagrees with eager at several batch sizes / lengths; ``verify``
compares eager and every variant on real held-out inputs; ``load_artifact`` gives a callable that takes raw
inputs (the bundled preprocessing included).

Example:
    >>> from torchwork.deploy import export, verify, load_artifact     # doctest: +SKIP
    >>> export(model, example_inputs, "artifacts/m", formats=("pt2", "onnx"), samples=x_test,
    ...        targets=y_test, quantize="int8")                         # doctest: +SKIP
    >>> verify("artifacts/m")["ok"]                                      # doctest: +SKIP
    True
    >>> load_artifact("artifacts/m")(x_test[:4]).shape                   # doctest: +SKIP
    torch.Size([4, 10])
"""

from __future__ import annotations

# None of these modules imports torch, onnx or onnxruntime at import time: they do it inside functions.
from torchwork.deploy.contents import load_weights
from torchwork.deploy.loaded import LoadedArtifact, load_artifact
from torchwork.deploy.manifest import Manifest, read_manifest
from torchwork.deploy.pipeline import export
from torchwork.deploy.plan import ExportPlan
from torchwork.deploy.preprocess import TokenIdsPreprocessor
from torchwork.deploy.quantize import torch_dynamic_int8
from torchwork.deploy.replay import replay_artifact
from torchwork.deploy.verification import format_report, verify

__all__ = ["ExportPlan", "LoadedArtifact", "Manifest", "TokenIdsPreprocessor", "export", "format_report", "load_artifact", "load_weights",
           "read_manifest", "replay_artifact", "torch_dynamic_int8", "verify"]
