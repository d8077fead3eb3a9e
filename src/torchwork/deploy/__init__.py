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

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_package

# Each public name written once: type checkers and IDEs read these imports (and flag a misspelt name); at run
# time lazy.lazy_package reads them back and each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.deploy.contents import load_weights  # noqa: F401
    from torchwork.deploy.loaded import LoadedArtifact, load_artifact  # noqa: F401
    from torchwork.deploy.manifest import Manifest, read_manifest  # noqa: F401
    from torchwork.deploy.pipeline import export  # noqa: F401
    from torchwork.deploy.plan import ExportPlan  # noqa: F401
    from torchwork.deploy.preprocess import TokenIdsPreprocessor  # noqa: F401
    from torchwork.deploy.quantize import torch_dynamic_int8  # noqa: F401
    from torchwork.deploy.replay import replay_artifact  # noqa: F401
    from torchwork.deploy.verification import format_report, verify  # noqa: F401

__all__ = lazy_package(__file__, globals())  # each name imported on first use; _LAZY: name -> module
