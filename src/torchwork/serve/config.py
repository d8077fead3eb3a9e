"""Every server setting in one dataclass; the ``torchwork serve`` flags of the same names set them.

Example:
    >>> from torchwork.serve.config import ServeConfig
    >>> ServeConfig(max_batch_size=64).max_wait_ms
    2.0
"""

from __future__ import annotations

import dataclasses

from torchwork.errors import ConfigError


@dataclasses.dataclass
class ServeConfig:
    """Every server setting; the ``torchwork serve`` flags of the same names set them.

    ``max_wait_ms`` is an upper bound: the batcher waits only while requests keep arriving concurrently.
    ``threads`` is the model's compute threads (default: every CPU but one, left to the event loop).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch_size: int = 32
    max_wait_ms: float = 2.0
    max_queue: int = 1024
    max_items: int = 64
    max_text_length: int = 10_000
    max_body_bytes: int = 4 * 1024 * 1024
    timeout_s: float = 30.0
    threads: int | None = None
    log_level: str = "warning"

    def __post_init__(self) -> None:
        positive = {"max_batch_size": self.max_batch_size, "max_queue": self.max_queue,
                    "max_items": self.max_items, "max_text_length": self.max_text_length,
                    "max_body_bytes": self.max_body_bytes, "timeout_s": self.timeout_s}
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{name}={value} must be positive.")
        if self.max_wait_ms < 0:
            raise ConfigError(f"max_wait_ms={self.max_wait_ms} must be 0 (never wait) or more.")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads={self.threads} must be at least 1.")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port={self.port} is not a TCP port (0 picks a free one).")
