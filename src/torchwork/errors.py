"""The one exception hierarchy of torchwork.

Every message says what was wrong, where, and what to do about it. Each class also derives from the
built-in exception a caller would catch without torchwork (``ValueError`` for a bad value, ``RuntimeError``
for a failure while running, ``OSError`` for the filesystem), so ``except ValueError`` keeps working.

The hierarchy (every class is importable from ``torchwork`` itself)::

    TorchworkError
    ├── ConfigError  (ValueError)         a setting or argument has a value that cannot work
    ├── BatchError  (ValueError)          a batch does not have the shape the engine expects
    ├── LossError  (ValueError)           the loss cannot be backpropagated
    ├── DeviceError  (RuntimeError)       a device is unavailable, or tensors sit on different devices
    ├── CheckpointError  (RuntimeError)   a checkpoint is missing, corrupt or does not match the model
    │   └── NonFiniteWeightsError         the weights to save hold NaN/inf: the checkpoint is refused
    ├── DataError  (RuntimeError)         a dataset is missing or malformed
    ├── DistributedError  (RuntimeError)  ranks disagree, or a peer failed
    ├── ExportError  (RuntimeError)       an export disagrees with eager, or an artifact is damaged
    ├── QueueFullError  (RuntimeError)    a server's queue is full or it is shutting down: retry later
    ├── ServeError  (RuntimeError)        a model server did not start, become ready, or answer
    │   └── ModelProcessError             the model process failed to start or died
    ├── ModelOutputError  (RuntimeError)  a model gave another number of rows than it was given items
    └── DiskFullError  (OSError)          a file does not fit; the previous version of it is intact

Example:
    >>> from torchwork.errors import ConfigError, DistributedError, TorchworkError
    >>> issubclass(ConfigError, TorchworkError) and issubclass(ConfigError, ValueError)
    True
    >>> import torchwork
    >>> torchwork.DistributedError is DistributedError
    True
"""

from __future__ import annotations

from typing import Any


class TorchworkError(Exception):
    """Base class of every error torchwork raises on purpose."""


class ConfigError(TorchworkError, ValueError):
    """A setting or argument has a value that cannot work."""


class BatchError(TorchworkError, ValueError):
    """A batch does not have the shape the engine expects."""


class LossError(TorchworkError, ValueError):
    """The loss function returned something that cannot be backpropagated."""


class DeviceError(TorchworkError, RuntimeError):
    """A device is unavailable or tensors sit on different devices."""


class CheckpointError(TorchworkError, RuntimeError):
    """A checkpoint is missing, corrupt or does not match the model."""


class NonFiniteWeightsError(CheckpointError):
    """The weights to checkpoint hold NaN/inf: the checkpoint is refused, training may go on."""


class DataError(TorchworkError, RuntimeError):
    """A dataset is missing or malformed."""


class DistributedError(TorchworkError, RuntimeError):
    """Ranks disagree or a peer failed."""


class ExportError(TorchworkError, RuntimeError):
    """An export cannot reproduce the eager model, or an artifact is damaged."""

    #: When an export refused to write its artifact: what it measured (``ok``, ``refused``, ``parity``).
    report: dict[str, Any] | None = None


class QueueFullError(TorchworkError, RuntimeError):
    """A server's request queue is full (or it is shutting down): retry later."""


class ServeError(TorchworkError, RuntimeError):
    """A model server did not start, did not become ready, or did not answer."""


class ModelProcessError(ServeError):
    """The model process failed to start or died."""


class ModelOutputError(TorchworkError, RuntimeError):
    """A model returned outputs that do not match its inputs (another number of rows than items)."""


class DiskFullError(TorchworkError, OSError):
    """A file does not fit on its filesystem; the previous version of it is intact."""
