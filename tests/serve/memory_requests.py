"""Starlette requests built in memory, for calling a route's handler without a server."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request


def memory_request(headers: dict[str, str] | None = None, body: bytes = b"", path: str = "/predict",
                   path_params: dict[str, Any] | None = None, client: str = "127.0.0.1") -> Request:
    """A POST to ``path`` with ``headers`` and ``body``, from ``client``."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": path, "path_params": path_params or {},
             "query_string": b"", "client": (client, 50000),
             "headers": [(key.lower().encode(), value.encode()) for key, value in (headers or {}).items()]}
    return Request(scope, receive)
