"""torchwork: PyTorch engineering practice as software.

The public API is imported lazily so that ``torchwork --help`` never imports torch.

Example:
    >>> import torchwork
    >>> torchwork.__version__
    '0.1.0'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_attributes

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "Trainer": "torchwork.engine.trainer",
    "EarlyStopping": "torchwork.engine.callbacks",
    "Callback": "torchwork.engine.callbacks",
    "resolve_device": "torchwork.engine.devices",
    "move_to_device": "torchwork.engine.devices",
    "seed_everything": "torchwork.seeding",
    # the Trainer's setting groups
    **dict.fromkeys(["StepOptions", "EvaluationOptions", "LoggingOptions", "DistributedOptions"], "torchwork.engine.options"),
    "RunOptions": "torchwork.runs.options",
    "choose_threads": "torchwork.threads",
    # every error class, drawn as a tree in torchwork/errors.py
    **dict.fromkeys(["TorchworkError", "ConfigError", "BatchError", "LossError", "DeviceError", "CheckpointError",
                     "NonFiniteWeightsError", "DataError", "DistributedError", "ExportError", "QueueFullError",
                     "ServeError", "ModelProcessError", "ModelOutputError", "DiskFullError"], "torchwork.errors"),
}

__all__ = ["__version__", *_LAZY]

# Type checkers read the imports (and flag a misspelt name); at run time each name is imported on first use.
if TYPE_CHECKING:  # pragma: no cover
    from torchwork.engine.callbacks import Callback, EarlyStopping  # noqa: F401
    from torchwork.engine.devices import move_to_device, resolve_device  # noqa: F401
    from torchwork.engine.options import DistributedOptions, EvaluationOptions, LoggingOptions, StepOptions  # noqa: F401
    from torchwork.engine.trainer import Trainer  # noqa: F401
    from torchwork.errors import (  # noqa: F401
        BatchError,
        CheckpointError,
        ConfigError,
        DataError,
        DeviceError,
        DiskFullError,
        DistributedError,
        ExportError,
        LossError,
        ModelOutputError,
        ModelProcessError,
        NonFiniteWeightsError,
        QueueFullError,
        ServeError,
        TorchworkError,
    )
    from torchwork.runs.options import RunOptions  # noqa: F401
    from torchwork.seeding import seed_everything  # noqa: F401
    from torchwork.threads import choose_threads  # noqa: F401
else:
    __getattr__, __dir__ = lazy_attributes("torchwork", _LAZY, globals())
