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
from torchwork.finite import is_count
from torchwork.paths import file_kind  # what a mode is, in words (a FIFO, a character device)
from torchwork.quoting import quote_value

HTTP_PARSERS = ("h11", "httptools")

# Each number setting's largest value, and why: checked when the config is built, before any model loads, so a
# value that cannot work is refused in one line (and never reaches pydantic's schema or the model process).
DAY_S = 86_400.0
UPPER_BOUNDS: dict[str, tuple[float, str]] = {
    "max_batch_size": (2**16, "items in one model call"),
    "max_wait_ms": (60_000.0, "a minute: a request waits this long for its batch to fill"),
    "max_queue": (2**24, "items waiting at once, each held in memory"),
    "max_items": (2**20, "items in one request, each checked and held in memory"),
    "max_text_length": (2**24, "characters in one text item"),
    "max_body_bytes": (2**30, "1 GiB: a request's body is held in memory whole"),
    "timeout_s": (DAY_S, "a day"),
    "head_timeout_s": (DAY_S, "a day"),
    "body_timeout_s": (DAY_S, "a day"),
    "idle_timeout_s": (DAY_S, "a day"),
    "max_connections": (2**20, "connections open at once, each an open file"),
}
INTEGER_SETTINGS = ("max_batch_size", "max_queue", "max_items", "max_text_length", "max_body_bytes",
                    "max_connections")
THREADS_PER_CPU = 4  # more compute threads than this per usable CPU only contend for the cores


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
    Every number setting is checked when the config is built, before any model loads: positive and finite, at
    most its :data:`UPPER_BOUNDS` entry (e.g. ``max_items`` 2**20, ``max_batch_size`` 2**16, timeouts a day).
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
        self.check_numbers()
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
        if not is_count(self.port, 0, 65535):  # 2.5 was taken, and '8000' a TypeError
            raise ConfigError(f"port={quote_value(self.port)} is not a TCP port (0 picks a free one).")

    def check_numbers(self) -> None:
        """A :class:`ConfigError` naming the setting and its flag for a number setting out of its range: every
        limit positive, finite and at most its :data:`UPPER_BOUNDS` (``max_wait_ms`` may be 0), the counts whole
        numbers, ``threads`` 1 to :data:`THREADS_PER_CPU` per usable CPU."""
        for name, (cap, why) in UPPER_BOUNDS.items():
            value, flag, whole = getattr(self, name), "--" + name.replace("_", "-"), name in INTEGER_SETTINGS
            shown = quote_value(value)
            span = f"{flag} {'1' if whole else '0'} to {_number(cap, '')}" if whole or name == "max_wait_ms" \
                else f"{flag} more than 0 and at most {_number(cap, '')}"
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{name}={shown} must be a number; give {span}.")
            if name == "max_wait_ms":
                if not 0 <= value < float("inf"):  # NaN too
                    raise ConfigError(f"max_wait_ms={shown} must be 0 (never wait) or more, and finite; give {span}.")
            elif not value > 0 or value == float("inf"):  # NaN and infinity too
                raise ConfigError(f"{name}={shown} must be positive and finite; give {span}.")
            if whole and not isinstance(value, int):
                raise ConfigError(f"{name}={shown} must be a whole number; give {span}.")
            if value > cap:
                raise ConfigError(f"{name}={shown} is over {_number(cap)}, the most {flag} allows ({why}); give "
                                  f"{span}.")
        if self.threads is not None:
            from torchwork.threads import usable_cpus

            most = THREADS_PER_CPU * usable_cpus()
            if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 1 <= self.threads <= most:
                raise ConfigError(f"threads={quote_value(self.threads)} must be a whole number from 1 to {most} "
                                  f"({THREADS_PER_CPU} per usable CPU: more only contend for the cores); give "
                                  "--threads N in that range, or --threads auto.")


def _number(cap: float, grouping: str = ",") -> str:
    """A bound as a message writes it: 65,536; 86,400; 0.5 (``grouping=""``: 65536, as a flag takes it)."""
    return format(int(cap), grouping) if float(cap).is_integer() else f"{cap:g}"


