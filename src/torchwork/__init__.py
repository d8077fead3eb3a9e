"""torchwork: PyTorch engineering practice as software.

The public API is imported lazily so that ``torchwork --help`` never imports torch.

Example:
    >>> import torchwork
    >>> torchwork.__version__
    '0.1.0'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchwork.lazy import lazy_attributes, type_checking_imports

__version__ = "0.1.0"

# The public API, each name written once: type checkers and IDEs read these imports (and flag a misspelt name);
# at run time lazy.type_checking_imports reads them back and each name is imported on first use.
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

# public name -> module that defines it
_LAZY: dict[str, str] = type_checking_imports(__file__)
__all__ = ["__version__", *_LAZY]
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_attributes("torchwork", _LAZY, globals())
