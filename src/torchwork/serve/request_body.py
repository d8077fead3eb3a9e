"""Reading a request's body no further than the server's limit, declared length or chunked.

Example (a Starlette request is needed, so not run here):
    body = await read_body(request, 4 * 1024 * 1024)
    if isinstance(body, str):  # too large, or a bad content-length header: the message says which
        ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # pragma: no cover
    from starlette.requests import Request


_UNREAD = object()


async def read_body(request: Request, limit: int, content_length: str | None | object = _UNREAD) -> bytes | str:
    """The request body, or a message if it is larger than ``limit`` (read no further than that).
    ``content_length``: the request's Content-Length header (``None``: it has none), when the caller read
    its headers already."""
    declared = request.headers.get("content-length") if content_length is _UNREAD else cast("str | None",
                                                                                               content_length)
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            return f"header content-length={declared!r} is not a number"
        if size > limit:
            return (f"body: {size} bytes is more than this server's limit of {limit} bytes "
                    "(--max-body-bytes); send fewer items per request")
        return await request.body()  # the HTTP layer stops at the declared length
    chunks, total = [], 0
    async for chunk in request.stream():  # chunked: count as it comes
        total += len(chunk)
        if total > limit:
            return (f"body: more than this server's limit of {limit} bytes (--max-body-bytes); "
                    "send fewer items per request")
        chunks.append(chunk)
    return b"".join(chunks)
