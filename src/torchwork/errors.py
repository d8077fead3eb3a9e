"""The one exception hierarchy of torchwork.

Every message says what was wrong, where, and what to do about it.

Example:
    >>> from torchwork.errors import ConfigError, TorchworkError
    >>> issubclass(ConfigError, TorchworkError) and issubclass(ConfigError, ValueError)
    True
"""

from __future__ import annotations


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


class DataError(TorchworkError, RuntimeError):
    """A dataset is missing or malformed."""


class ExportError(TorchworkError, RuntimeError):
    """An export cannot reproduce the eager model, or an artifact is damaged."""


class QueueFullError(TorchworkError, RuntimeError):
    """A server's request queue is full (or it is shutting down): retry later."""


class ServeError(TorchworkError, RuntimeError):
    """A model server did not start, did not become ready, or did not answer."""


class DiskFullError(TorchworkError, OSError):
    """A file does not fit on its filesystem; the previous version of it is intact."""


class ModelOutputError(TorchworkError, RuntimeError):
    """A model returned outputs that do not match its inputs (another number of rows than items)."""


class ModelProcessError(ServeError):
    """The model process failed to start or died."""
