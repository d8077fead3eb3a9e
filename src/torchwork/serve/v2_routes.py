"""The Open Inference Protocol's REST routes (KServe v2, as Triton serves them), beside ``POST /predict``.

- ``GET /v2``: the server's name, version and extensions;
- ``GET /v2/health/live``, ``GET /v2/health/ready``: for probes (always open, keys or not);
- ``POST /v2/repository/index``: every served model and version, with its state (``READY``, ``LOADING``);
- ``GET /v2/models/{name}[/versions/{v}]``: its inputs and outputs (name, datatype, shape; -1: any length);
- ``GET /v2/models/{name}[/versions/{v}]/ready``;
- ``POST /v2/models/{name}[/versions/{v}]/infer``: JSON tensors or the binary tensor extension
  (:mod:`torchwork.serve.inference_protocol`), through the model's own batcher, limits and metrics, the very
  ones ``/predict`` uses.

Errors are ``{"error": "..."}``: 400 for a request that is not the protocol, 404 for an unknown model or
version, 413 for a body over ``--max-body-bytes``, 415 for a body declared as anything but JSON or binary
tensors, 422 for tensors this model does not take, 503 while warming up or when the queue is full, 504
past ``--timeout-s``.

The infer route takes a body with no Content-Type, because ``tritonclient.http`` sends none; a form or
``text/plain`` (what a browser may send cross-origin without asking first) is refused.

Example (the routes of an app serving one model):
    >>> import torch
    >>> from torchwork.serve import ServeConfig, TorchPredictor, create_app
    >>> app = create_app(TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,)), ServeConfig(), name="tiny")
    >>> sorted(r.path for r in app.routes if r.path.startswith("/v2"))[:3]
    ['/v2', '/v2/health/live', '/v2/health/ready']
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request, Response  # this module is imported by the app only, as fastapi is

from torchwork.errors import QueueFullError
from torchwork.serve.inference_protocol import HEADER, ProtocolError, parse_request
from torchwork.serve.raw_route import RawRoute
from torchwork.serve.request_body import read_body
from torchwork.serve.routes import json_response
from torchwork.serve.v2_model import V2Model

EXTENSIONS = ["binary_tensor_data", "model_repository"]
_ACCEPTED_TYPES = ("application/json", "application/octet-stream")
_HEADER_BYTES = HEADER.encode()
_LOAD_BODY = ('load request body must be a JSON object like {"parameters": {"version": "2"}} (or empty: the '
              'newest version)')


def path_parameters(path: str) -> dict[str, Any]:
    """``openapi_extra`` declaring each ``{param}`` of ``path`` in the schema: these handlers take the
    ``Request`` itself, so FastAPI sees no parameter to declare, and a client generated from a schema with
    an undeclared path parameter breaks.

    Example:
        >>> [p["name"] for p in path_parameters("/v2/models/{name}/versions/{version}")["parameters"]]
        ['name', 'version']
    """
    return {"parameters": [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                           for name in re.findall(r"\{(\w+)\}", path)]}


def v2_error(status: int, message: str, retry_after: int | None = None) -> Response:
    """An error answer as the protocol writes it: ``{"error": message}``."""
    return json_response(status, json.dumps({"error": message}).encode(), retry_after)


def _ok(document: Any) -> Response:
    return json_response(200, json.dumps(document).encode())


def _detail(body: bytes) -> str:
    """The message of one of the batcher's error answers (``{"detail": ...}``)."""
    try:
        return str(json.loads(body)["detail"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")


def _infer_headers(scope: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """The Content-Type, Inference-Header-Content-Length and Content-Length of a request (the first of
    each, as Starlette's ``headers.get``), in one pass over its headers (ASGI's names are lower case)."""
    content_type = declared = length = None
    for key, value in scope["headers"]:
        if key == b"content-length":
            if length is None:
                length = value.decode("latin-1")
        elif key == _HEADER_BYTES:
            if declared is None:
                declared = value.decode("latin-1")
        elif key == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
    return content_type, declared, length


async def _control_body(request: Request, example: str) -> dict[str, Any] | Response:
    """The JSON object a control request sends (``{}`` for an empty body), or the error answer to it."""
    body = await read_body(request, 4096)
    if isinstance(body, str):
        return v2_error(413, body)
    if not body.strip():
        return {}
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        return v2_error(400, f"the {example}")
    return document


class V2Routes:
    """The routes' handlers. ``find(name, version)`` returns the model's state (with ``v2``, ``ready``,
    ``batcher``, ``deadlines``, ``config``) or raises :class:`ProtocolError` (404); ``listing()`` is every
    (name, version, state) served."""

    def __init__(self, find: Callable[[str, str | None], Any], listing: Callable[[], list[Any]],
                 server_version: str) -> None:
        self.find, self.listing, self.server_version = find, listing, server_version

    def found(self, request: Request) -> Any:
        """The state of the model (and version) the request's path names; :class:`ProtocolError` if none."""
        params = request.path_params
        return self.find(params["name"], params.get("version"))

    async def infer(self, request: Request) -> Response:
        """``POST .../infer``: JSON or binary tensors in, through the model's batcher, tensors out."""
        content_type, declared, length = _infer_headers(request.scope)
        if content_type is not None and content_type.partition(";")[0].strip().lower() not in _ACCEPTED_TYPES:
            return v2_error(415, f"Content-Type {content_type!r} is not accepted: send JSON tensors as "
                                 "application/json, binary tensors as application/octet-stream")
        try:
            state = self.found(request)
        except ProtocolError as problem:
            return v2_error(problem.status, str(problem))
        if not state.ready.is_set():
            return v2_error(503, f"model {state.v2.name!r} is still warming up; retry shortly", retry_after=1)
        body = await read_body(request, state.config.max_body_bytes, length)
        if isinstance(body, str):
            return v2_error(400 if body.startswith("header") else 413, body)
        try:
            header_length = None if declared is None else int(declared)
        except ValueError:
            return v2_error(400, f"header Inference-Header-Content-Length={declared!r} is not a number")
        try:
            # Again, after the body came: nothing awaits from here to submit, so a reload that switched
            # versions meanwhile is seen, and the old version's batcher is never handed a request.
            state = self.found(request)
            model: V2Model = state.v2
            parsed = parse_request(body, header_length)
            items = model.items(parsed)
            model.check_outputs(parsed)
        except ProtocolError as problem:
            return v2_error(problem.status, str(problem))
        try:
            job = state.batcher.submit(items, _keep_fragments)
        except QueueFullError as full:
            return v2_error(503, f"the server is busy: {full}", retry_after=1)
        state.deadlines.add(job)
        status, payload = await job
        if status != 200:
            return v2_error(status, _detail(payload))
        try:
            answer, json_length = model.answer(parsed, payload)
        except ProtocolError as problem:
            return v2_error(problem.status, str(problem))
        if json_length is None:
            return Response(answer, 200, media_type="application/json")
        response = Response(answer, 200, media_type="application/octet-stream")
        response.raw_headers.append((_HEADER_BYTES, b"%d" % json_length))  # not through a dict: per request
        return response

    async def server_metadata(self) -> Response:
        return _ok({"name": "torchwork", "version": self.server_version, "extensions": EXTENSIONS})

    async def live(self) -> Response:
        return _ok({"live": True})

    async def ready(self) -> Response:
        states = self.listing()
        if states and all(state == "READY" for _, _, state in states):
            return _ok({"ready": True})
        return json_response(503, json.dumps({"ready": False, "error": "a model is still loading or warming up"})
                             .encode(), retry_after=1)

    async def model_metadata(self, request: Request) -> Response:
        try:
            return _ok(self.found(request).v2.metadata())
        except ProtocolError as problem:
            return v2_error(problem.status, str(problem))

    async def model_ready(self, request: Request) -> Response:
        try:
            state = self.found(request)
        except ProtocolError as problem:
            return v2_error(problem.status, str(problem))
        document = {"name": state.v2.name, "version": state.v2.version, "ready": state.ready.is_set()}
        if state.ready.is_set():
            return _ok(document)
        return json_response(503, json.dumps({**document, "error": "warming up"}).encode(), retry_after=1)

    async def index(self, request: Request) -> Response:
        document = await _control_body(request, 'index request body must be a JSON object like {"ready": true}')
        if isinstance(document, Response):
            return document
        only_ready = bool(document.get("ready", False))
        return _ok([{"name": name, "version": version, "state": state}
                    for name, version, state in self.listing() if state == "READY" or not only_ready])


def add_v2_routes(app: FastAPI, find: Callable[[str, str | None], Any], listing: Callable[[], list[Any]],
                  counted: Callable[..., Callable[[Request], Awaitable[Response]]], server_version: str) -> None:
    """Add the routes to ``app``, the infer routes first. ``find`` and ``listing``: as :class:`V2Routes`
    takes them; ``counted(handler, route, fail)`` wraps a handler with the metrics."""
    routes = V2Routes(find, listing, server_version)
    handler = counted(routes.infer, "/v2/models/{name}/infer", v2_error)
    for path in ("/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"):
        app.router.add_api_route(path, handler, methods=["POST"], include_in_schema=path.count("{") == 1,
                                 summary="Open Inference Protocol: infer (JSON or binary tensors)",
                                 openapi_extra=path_parameters(path), route_class_override=RawRoute)
    app.add_api_route("/v2", routes.server_metadata, methods=["GET"],
                      summary="Open Inference Protocol: server metadata")
    app.add_api_route("/v2/health/live", routes.live, methods=["GET"], summary="Open Inference Protocol: alive")
    app.add_api_route("/v2/health/ready", routes.ready, methods=["GET"], summary="Open Inference Protocol: ready")
    app.add_api_route("/v2/repository/index", routes.index, methods=["POST"],
                      summary="The served models, their versions and states")
    for suffix in ("", "/versions/{version}"):
        for path, route, summary in ((f"/v2/models/{{name}}{suffix}", routes.model_metadata, "model metadata"),
                                     (f"/v2/models/{{name}}{suffix}/ready", routes.model_ready, "model ready")):
            app.add_api_route(path, route, methods=["GET"], include_in_schema=not suffix,
                              summary=f"Open Inference Protocol: {summary}", openapi_extra=path_parameters(path))


def _keep_fragments(fragments: Any) -> tuple[int, Any]:
    """The batcher's encoder for a v2 request: keep its prediction fragments; the route turns them into
    output tensors on the event loop."""
    return 200, list(fragments)


def add_model_control(app: FastAPI, known: Callable[[str], bool],
                      reload: Callable[[str, str | None], Awaitable[str]], enabled: bool = False,
                      remote: bool = False) -> None:
    """``POST /v2/repository/models/{name}/load`` (Triton's model repository extension): load the model's
    newest version, or the one the body names (``{"parameters": {"version": "3"}}``), from its model folder,
    verified as any artifact, and switch to it with no downtime (:mod:`torchwork.serve.repository`).

    Off (403) unless ``enabled``; from loopback peers only unless ``remote``; with keys on, it needs one like every route. A version that
    fails to load or verify answers 400 with the reason, and the old version keeps serving.
    """
    from torchwork.serve.keys import is_loopback

    async def load(request: Request) -> Response:
        if not enabled:
            return v2_error(403, "model control is off: start the server with --enable-model-control (or send "
                                 "it SIGHUP to load every model's newest version)")
        peer = request.client.host if request.client else ""
        if not remote and not is_loopback(peer):
            return v2_error(403, f"model control is allowed from this machine only, not from {peer}; start the "
                                 "server with --model-control-remote to allow it from other machines")
        name = request.path_params["name"]
        if not known(name):
            return v2_error(404, f"no model {name!r} here")
        document = await _control_body(request, _LOAD_BODY)
        if isinstance(document, Response):
            return document
        parameters = document.get("parameters") or {}
        if not isinstance(parameters, dict):
            return v2_error(400, f"the {_LOAD_BODY}")
        unknown = sorted(set(parameters) - {"version"})
        if unknown:
            return v2_error(400, f"parameters {unknown} are not taken: only \"version\", a version folder "
                                 "inside the model folder, can be loaded")
        version = parameters.get("version")
        if version is not None and not isinstance(version, str):
            return v2_error(400, "parameters.version must be a string")
        try:
            serving = await reload(name, version)
        except ProtocolError as problem:
            return v2_error(problem.status, str(problem))
        return _ok({"name": name, "version": serving, "state": "READY"})

    path = "/v2/repository/models/{name}/load"
    app.add_api_route(path, load, methods=["POST"], openapi_extra=path_parameters(path),
                      summary="Load a model's newest (or named) version from its model folder, with no downtime")
