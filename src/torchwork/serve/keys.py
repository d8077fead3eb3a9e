"""API keys: ``Authorization: Bearer KEY`` on every route but the health probes, checked before the app runs.

Keys come from ``--api-key-file FILE`` (one a line; blank lines and ``#`` comments skipped; a line
``sha256:HEX`` is a key's digest, so the file need not hold the key itself) and from the environment variable
``TORCHWORK_API_KEYS`` (comma-separated). Only their SHA-256 digests are kept in memory, and a request's key
is hashed and compared with every digest by :func:`hmac.compare_digest`, so the time taken says nothing about
how much of a key was right (vLLM's auth middleware does the same). A missing or wrong key gets 401 with
``WWW-Authenticate: Bearer``; each refusal is counted in ``/metrics``
(``torchwork_auth_failures_total{reason=...}``) and logged with the peer and the path, never the key.
``/healthz``, ``/readyz`` and ``/v2/health/*`` stay open for probes; ``/metrics`` too with ``--open-metrics``.
SIGHUP reads the key file again (a file that has become unreadable or empty keeps the keys in force).

Example:
    >>> ring = KeyRing.from_lines(["# the team's key", "correct-horse-battery-staple"])
    >>> ring.allows("Bearer correct-horse-battery-staple"), ring.allows("Bearer guess"), ring.allows(None)
    (True, False, False)
    >>> import hashlib
    >>> digest = hashlib.sha256(b"correct-horse-battery-staple").hexdigest()
    >>> KeyRing.from_lines([f"sha256:{digest}"]).allows("Bearer correct-horse-battery-staple")
    True
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from torchwork.errors import ConfigError
from torchwork.serve.key_file import read_key_file
from torchwork.serve.metrics import Counter

logger = logging.getLogger("torchwork.serve")

ENVIRONMENT = "TORCHWORK_API_KEYS"
MIN_KEY_LENGTH = 16
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"})


class KeyRing:
    """The SHA-256 digests of the keys in force; :meth:`allows` checks an ``Authorization`` header."""

    def __init__(self, digests: Iterable[bytes], source: str = "keys") -> None:
        self.digests = tuple(dict.fromkeys(digests))
        self.source = source

    @classmethod
    def from_lines(cls, lines: Iterable[str], source: str = "keys") -> KeyRing:
        """Keys (or ``sha256:HEX`` digests) one a line; raise :class:`~torchwork.errors.ConfigError` for a key
        shorter than 16 characters or a malformed digest, naming the line (never the key)."""
        digests = []
        for number, line in enumerate(lines, start=1):
            key = line.strip().removeprefix("\ufeff").strip()  # a byte-order mark, as some editors write
            if not key or key.startswith("#"):
                continue
            if not key.isascii() or not key.isprintable():  # a client sends a header as latin-1 bytes
                raise ConfigError(f"{source} line {number}: a key must be printable ASCII (letters, digits, "
                                  "punctuation), else no client's header can match it; make one with: python -c "
                                  "'import secrets; print(secrets.token_urlsafe(32))'")
            if key[:7].lower() == "sha256:":
                try:
                    digest = bytes.fromhex(key[7:])
                except ValueError:
                    digest = b""
                if len(digest) != 32:
                    raise ConfigError(f"{source} line {number}: 'sha256:' must be followed by 64 hex digits (the "
                                      "key's SHA-256 digest, e.g. from: printf %s KEY | sha256sum)")
                digests.append(digest)
            elif len(key) < MIN_KEY_LENGTH or any(c.isspace() for c in key):
                raise ConfigError(f"{source} line {number}: a key must be at least {MIN_KEY_LENGTH} characters "
                                  "without spaces; make one with: python -c 'import secrets; "
                                  "print(secrets.token_urlsafe(32))'")
            else:
                digests.append(hashlib.sha256(key.encode()).digest())
        return cls(digests, source)

    @classmethod
    def load(cls, key_file: str | None, environ: dict[str, str] | None = None) -> KeyRing | None:
        """The keys of ``key_file`` and of ``TORCHWORK_API_KEYS``; ``None`` when neither gives any."""
        environ = dict(os.environ) if environ is None else environ
        digests: list[bytes] = []
        sources = []
        if key_file is not None:  # the file's own keys: an emptied file is a mistake, whatever the environment
            digests += cls.from_lines(read_key_file(key_file), f"--api-key-file {key_file}").digests
            sources.append(key_file)
            if not digests:
                raise ConfigError(f"--api-key-file {key_file} holds no key: write one key a line (at least "
                                  f"{MIN_KEY_LENGTH} characters), or a line sha256:HEX with its digest")
        if environ.get(ENVIRONMENT, "").strip():
            digests += cls.from_lines(environ[ENVIRONMENT].split(","), ENVIRONMENT).digests
            sources.append(ENVIRONMENT)
        return cls(digests, " and ".join(sources)) if digests else None

    def allows(self, authorization: str | None) -> bool:
        """Whether the header value ``Bearer KEY`` names a key in force (compared in constant time)."""
        if authorization is None:
            return False
        scheme, _, key = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return False
        digest = hashlib.sha256(key.strip().encode()).digest()
        found = False
        for known in self.digests:  # every digest, so the time does not say which one matched
            found |= hmac.compare_digest(digest, known)
        return found


def printable(text: str) -> str:
    """``text`` with control characters escaped, for a log line: a path's ``%0a`` cannot start a forged line.

    Example:
        >>> printable("/predict\\nrefused GET / from 10.0.0.1\\x1b[2J")
        '/predict\\\\nrefused GET / from 10.0.0.1\\\\x1b[2J'
    """
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in text)


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, keys: KeyRing | None, insecure_no_auth: bool, warn: bool = True) -> None:
    """Refuse to serve a non-loopback address without keys, unless ``--insecure-no-auth`` says so (then warn,
    unless ``warn`` is false: a check before the start that warns)."""
    if keys is not None or is_loopback(host):
        return
    if not insecure_no_auth:
        raise ConfigError(f"--host {host} lets other machines call this server, and no API key is set: add "
                          f"--api-key-file FILE (one key a line) or set {ENVIRONMENT}=KEY, and clients send "
                          "'Authorization: Bearer KEY'; or pass --insecure-no-auth to serve anyone who reaches "
                          "the port.")
    if warn:
        logger.warning("serving %s with no API key (--insecure-no-auth): anyone who reaches the port can call "
                       "every route", host)


class KeyCheck:
    """What the key guard decides, shared by the app and the server: the keys in force (:attr:`ring`;
    :meth:`rotate` replaces them), the open paths, and the refusals counted and logged.

    ``open_metrics``: ``/metrics`` needs no key. Refusals are logged at most once a second per reason (a flood
    of guesses must not flood the log), with how many were refused since the last line.
    """

    def __init__(self, ring: KeyRing, open_metrics: bool = False, key_file: str | None = None) -> None:
        self.ring, self.key_file = ring, key_file
        self.open_paths = OPEN_PATHS | ({"/metrics"} if open_metrics else set())
        self.failures = Counter("torchwork_auth_failures_total", "requests refused for a missing or wrong API "
                                "key", "reason")
        self._logged: dict[str, tuple[float, int]] = {}

    def render(self) -> str:
        return self.failures.render()

    def rotate(self) -> None:
        """Read the key file (and ``TORCHWORK_API_KEYS``) again; on any problem keep the keys in force."""
        try:
            ring = KeyRing.load(self.key_file)
        except ConfigError as error:
            logger.error("kept the API keys in force: %s", error)
            return
        if ring is None:
            logger.error("kept the API keys in force: no key is set any more")
            return
        self.ring = ring
        logger.warning("API keys reloaded from %s: %d in force", ring.source, len(ring.digests))

    def refusal(self, scope: dict[str, Any]) -> bytes | None:
        """``None`` if the request may go on, else the JSON body of its 401 (counted and logged here)."""
        if scope["path"] in self.open_paths:
            return None
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        if self.ring.allows(authorization):
            return None
        reason = "missing" if authorization is None else "wrong"
        self.failures.inc(reason)
        self._log(reason, scope)
        message = ("this server needs an API key: send the header 'Authorization: Bearer KEY'" if reason == "missing"
                   else "the API key is not one this server accepts (or not sent as 'Authorization: Bearer KEY')")
        return json.dumps({"error": message} if scope["path"].startswith("/v2")
                          else {"detail": message, "errors": []}).encode()

    def _log(self, reason: str, scope: dict[str, Any]) -> None:
        now = time.monotonic()
        last, skipped = self._logged.get(reason, (-1e9, 0))
        if now - last < 1.0:
            self._logged[reason] = (last, skipped + 1)
            return
        client = scope.get("client")
        peer = f"{client[0]}:{client[1]}" if client else "a client"
        more = f" ({skipped} more refused since the last line)" if skipped else ""
        logger.warning("refused %s %s from %s: %s API key%s", scope.get("method"), printable(scope["path"]), peer,
                       reason, more)
        self._logged[reason] = (now, 0)


class KeyGuard:
    """ASGI middleware: ``app`` behind ``check`` (a :class:`KeyCheck`); a refusal is a 401 with
    ``WWW-Authenticate: Bearer``, before the app reads the body."""

    def __init__(self, app: Any, check: KeyCheck) -> None:
        self.app, self.check = app, check

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        refused = self.check.refusal(scope) if scope["type"] == "http" else None
        if refused is None:
            return await self.app(scope, receive, send)
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(refused)).encode()),
            (b"www-authenticate", b'Bearer realm="torchwork"')]})
        await send({"type": "http.response.body", "body": refused})
