"""Slow, idle and surplus connections: bounded at the HTTP protocol, before the application sees them.

uvicorn bounds only the keep-alive wait after an answer (``timeout_keep_alive``): a socket that never sends,
a client that sends a header line every few seconds (slowloris) or a body byte by byte holds its connection
forever, and its ``limit_concurrency`` answers a plain-text 503 one connection early. So the server runs
uvicorn's httptools protocol (or, with ``--http h11``, its h11 one) with a guard (:func:`guarded_protocol`)
that tracks each connection's phase:

- ``idle``: no request in progress (just opened, or answered and kept alive): closed after ``idle_timeout_s``;
- ``head``: the first bytes of a request came, its head is not complete: after ``head_timeout_s``, a 408
  answer and the connection closed;
- ``body``: the head came, the body is not complete: after ``body_timeout_s``, a 408 and closed;
- answering: no bound here (the request's own ``--timeout-s`` answers 504).

One sweep every fraction of the smallest bound checks every open connection, so the hot path only records
the time of a phase change (no timer per request); a close is at most that fraction late. A connection
opened while ``max_connections`` are open already gets a JSON 503 with ``Retry-After`` for its request, and
is then closed. Each close is one INFO line and a count in ``/metrics``
(``torchwork_connections_closed_total{reason=...}``).

Example:
    >>> from torchwork.serve.connections import ConnectionGuard
    >>> guard = ConnectionGuard(head_timeout_s=10, body_timeout_s=30, idle_timeout_s=5, max_connections=100)
    >>> guard.sweep_every_s
    1.0
    >>> print(guard.closed.render().splitlines()[1])
    # TYPE torchwork_connections_closed_total counter
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from torchwork.errors import ConfigError
from torchwork.serve.metrics import Counter, Gauge
from torchwork.serve.schemas import error_body

logger = logging.getLogger("torchwork.serve")

IDLE, HEAD, BODY, ANSWERING = "idle", "head", "body", "answering"


class ConnectionGuard:
    """The bounds, the open connections, and the counts of closes; shared by every connection's protocol."""

    def __init__(self, *, head_timeout_s: float, body_timeout_s: float, idle_timeout_s: float,
                 max_connections: int) -> None:
        self.bounds = {IDLE: idle_timeout_s, HEAD: head_timeout_s, BODY: body_timeout_s}
        self.max_connections = max_connections
        self.sweep_every_s = min(1.0, max(0.05, min(self.bounds.values()) / 4))
        self.connections: set[Any] = set()
        self.closed = Counter("torchwork_connections_closed_total", "connections the server closed: idle, a "
                              "slow request head or body, or one past --max-connections", "reason")
        self.open = Gauge("torchwork_connections_open", "HTTP connections open", lambda: len(self.connections))
        self._sweeping = False

    def render(self) -> str:
        return f"{self.closed.render()}\n{self.open.render()}"

    def add(self, connection: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.connections.add(connection)
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(self.sweep_every_s, self._sweep, loop)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        for connection in list(self.connections):
            bound = self.bounds.get(connection.phase)
            if bound is not None and now - connection.since > bound:
                connection.expire()
        self._sweeping = bool(self.connections)
        if self._sweeping:
            loop.call_later(self.sweep_every_s, self._sweep, loop)

    def close(self, reason: str, client: Any, detail: str) -> None:
        self.closed.inc(reason)
        peer = f"{client[0]}:{client[1]}" if client else "a client"
        logger.info("closed the connection from %s: %s", peer, detail)

    def busy_app(self) -> Any:
        """The ASGI app a connection past ``max_connections`` gets: a JSON 503, then the connection closes."""
        body = error_body(f"the server has {self.max_connections} connections open (its --max-connections); "
                          "retry shortly, or reuse a connection")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"retry-after", b"1"), (b"connection", b"close")]

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            self.close("over_limit", scope.get("client"), f"more than {self.max_connections} connections open")
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return app


def _timeout_answer(message: str) -> bytes:
    body = error_body(message)
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


def guarded_protocol(guard: ConnectionGuard, http: str = "h11") -> type:
    """uvicorn's ``http`` protocol (``"h11"`` or ``"httptools"``) with ``guard``'s bounds (pass it as
    ``uvicorn.Config(http=...)``). Both follow a request through the same phases; only how a phase change
    is seen differs (h11's state machine, or httptools' parser callbacks)."""

    class Guarded:
        """The guard's side of a connection, whatever parses its HTTP."""

        phase = IDLE
        since = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)  # type: ignore[misc]
            self.since = time.monotonic()
            if len(self.connections) > guard.max_connections:  # type: ignore[attr-defined]
                self.app = guard.busy_app()
            guard.add(self, self.loop)  # type: ignore[attr-defined]

        def connection_lost(self, exc: Exception | None) -> None:
            guard.connections.discard(self)
            super().connection_lost(exc)  # type: ignore[misc]

        def data_received(self, data: bytes) -> None:
            if self.phase is IDLE:  # the first bytes of a request
                self.phase, self.since = HEAD, time.monotonic()
            super().data_received(data)  # type: ignore[misc]

        def expire(self) -> None:
            transport, cycle = self.transport, self.cycle  # type: ignore[attr-defined]
            if transport.is_closing():
                return
            bound = guard.bounds[self.phase]
            client = self.client  # type: ignore[attr-defined]
            if self.phase is IDLE:
                guard.close("idle_timeout", client, f"no request for {bound:g} s (--idle-timeout-s)")
            elif self.phase is HEAD:
                guard.close("head_timeout", client, f"request head not complete after {bound:g} s")
                transport.write(_timeout_answer(
                    f"the request head did not arrive within {bound:g} s (the server's --head-timeout-s)"))
            else:
                guard.close("body_timeout", client, f"request body not complete after {bound:g} s")
                if cycle is not None and not cycle.response_started:
                    self.scope["torchwork.body_timeout"] = True  # type: ignore[attr-defined]  # a 408, not a disconnect
                    transport.write(_timeout_answer(
                        f"the request body did not arrive within {bound:g} s (the server's --body-timeout-s)"))
            self.phase = ANSWERING
            transport.close()

    if http == "httptools":
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        except ImportError:
            raise ConfigError("--http httptools needs the httptools package: pip install httptools (or "
                              "serve with --http h11).") from None

        class GuardedHttpToolsProtocol(Guarded, HttpToolsProtocol):  # type: ignore[misc]
            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                if self.phase is HEAD:
                    self.phase, self.since = BODY, time.monotonic()

            def on_message_complete(self) -> None:
                super().on_message_complete()
                self.phase = ANSWERING

            def on_response_complete(self) -> None:
                super().on_response_complete()
                if self.phase is ANSWERING and not self.pipeline:  # answered; kept alive for the next one
                    self.phase, self.since = IDLE, time.monotonic()

        return GuardedHttpToolsProtocol
    if http != "h11":
        raise ConfigError(f"http={http!r}: the connection guard runs on 'h11' or 'httptools'.")
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(Guarded, H11Protocol):  # type: ignore[misc]
        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._follow()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._follow()

        def _follow(self) -> None:
            """The phase from h11's view of the client's side of the connection."""
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                if self.phase is not BODY:
                    self.phase, self.since = BODY, time.monotonic()
            elif state is h11.IDLE:
                if self.phase is not HEAD and self.phase is not IDLE:  # answered; kept alive for the next one
                    self.phase, self.since = IDLE, time.monotonic()
            else:
                self.phase = ANSWERING

    return GuardedH11Protocol
