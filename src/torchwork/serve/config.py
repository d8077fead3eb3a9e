"""Every server setting in one dataclass; the ``torchwork serve`` flags of the same names set them.

Example:
    >>> from torchwork.serve.config import ServeConfig
    >>> ServeConfig(max_batch_size=64).max_wait_ms
    2.0
"""

from __future__ import annotations

import dataclasses
import os

from torchwork.errors import ConfigError
from torchwork.paths import file_kind  # what a mode is, in words (a FIFO, a character device)

HTTP_PARSERS = ("h11", "httptools")


@dataclasses.dataclass
class ServeConfig:
    """Every server setting; the ``torchwork serve`` flags of the same names set them.

    ``max_wait_ms`` is an upper bound: the batcher waits only while requests keep arriving concurrently.
    ``threads`` is the compute threads of the model in this process (default: every CPU but one, left to
    the event loop); a :class:`~torchwork.serve.ModelProcess` chooses its own for the machine as it is unless
    given a count (``torchwork serve --threads N`` gives it N).
    Connections: a request's head must arrive within ``head_timeout_s`` of its first byte and its body
    within ``body_timeout_s`` of its head (else 408 and the connection is closed), a connection with no
    request in progress is closed after ``idle_timeout_s``, and past ``max_connections`` open at once a
    new connection's request gets 503. ``http`` is the HTTP parser under the connection guard: ``"httptools"``
    (C, in the ``serve`` extra; it took a third off the server's CPU per request) or ``"h11"`` (pure Python).
    Keys (:mod:`torchwork.serve.keys`): ``api_key_file`` (and ``TORCHWORK_API_KEYS``); ``open_metrics`` leaves
    ``/metrics`` open; ``insecure_no_auth`` lets a non-loopback ``host`` serve without keys. TLS: ``ssl_certfile``
    and ``ssl_keyfile`` (PEM), both or neither, checked before any model loads (:mod:`torchwork.serve.tls`);
    ``ssl_keyfile_password`` decrypts a key encrypted with a passphrase. ``enable_model_control``: ``POST /v2/repository/models/NAME/load``
    reloads a model (from loopback peers only, unless ``model_control_remote``). ``docs``: serve the interactive
    API docs (``/docs``, whose page loads Swagger UI from a public CDN, and ``/openapi.json``); off by default.
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
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    max_connections: int = 1000
    http: str = "httptools"
    api_key_file: str | None = None
    open_metrics: bool = False
    insecure_no_auth: bool = False
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = dataclasses.field(default=None, repr=False)  # a secret: never printed
    enable_model_control: bool = False
    model_control_remote: bool = False
    docs: bool = False

    def __post_init__(self) -> None:
        positive = {"max_batch_size": self.max_batch_size, "max_queue": self.max_queue,
                    "max_items": self.max_items, "max_text_length": self.max_text_length,
                    "max_body_bytes": self.max_body_bytes, "timeout_s": self.timeout_s,
                    "head_timeout_s": self.head_timeout_s, "body_timeout_s": self.body_timeout_s,
                    "idle_timeout_s": self.idle_timeout_s, "max_connections": self.max_connections}
        for name, value in positive.items():
            if not value > 0 or value == float("inf"):  # NaN and infinity too
                raise ConfigError(f"{name}={value} must be positive and finite.")
        if not 0 <= self.max_wait_ms < float("inf"):  # NaN too
            raise ConfigError(f"max_wait_ms={self.max_wait_ms} must be 0 (never wait) or more, and finite.")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"threads={self.threads} must be at least 1.")
        if self.http not in HTTP_PARSERS:
            raise ConfigError(f"http={self.http!r}: choose one of {', '.join(HTTP_PARSERS)}.")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ConfigError("TLS needs both --ssl-certfile (the certificate chain, PEM) and --ssl-keyfile (its "
                              "private key, PEM); give both, or neither for plain HTTP.")
        for flag, path in (("--ssl-certfile", self.ssl_certfile), ("--ssl-keyfile", self.ssl_keyfile),
                           ("--api-key-file", self.api_key_file)):
            if path is not None and not os.path.isfile(path):  # a FIFO or a device would block or never end
                raise ConfigError(f"{flag} {path} is not a regular file (a {file_kind(os.stat(path).st_mode)}); give "
                                  "a regular file." if os.path.exists(path) else f"{flag} {path}: no such file.")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port={self.port} is not a TCP port (0 picks a free one).")
