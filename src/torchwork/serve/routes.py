"""The app's own routes: ``POST /predict`` (a single model), ``/healthz``, ``/readyz`` and ``/metrics``, and
:func:`counted`, which every model route goes through (the ``/v2`` ones too).

Example (the routes of an app serving one model):
    >>> import torch
    >>> from torchwork.serve import ServeConfig, TorchPredictor, create_app
    >>> app = create_app(TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,)), ServeConfig())
    >>> [r.path for r in app.routes if r.path in ("/predict", "/healthz", "/readyz", "/metrics")]
    ['/predict', '/healthz', '/readyz', '/metrics']
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request, Response  # this module is imported by the app only, as fastapi is
from fastapi.responses import PlainTextResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from torchwork.errors import QueueFullError
from torchwork.serve.metrics import render_models
from torchwork.serve.raw_route import RawRoute
from torchwork.serve.request_body import read_body
from torchwork.serve.schemas import (
    check_rectangular,
    error_body,
    response_models,
    validation_errors,
    validation_message,
)
from torchwork.serve.served_models import ServedModels

logger = logging.getLogger("torchwork.serve")

Handler = Callable[[Request], Awaitable[Response]]

_PREDICT_ERRORS = [(400, "bad request headers"), (408, "the request's head or body came too slowly"),
                   (413, "body larger than the server allows"),
                   (415, "the body is not declared as JSON (Content-Type: application/json)"),
                   (422, "invalid input; the message names the field"),
                   (503, "not ready, or the queue is full (see Retry-After)"),
                   (504, "not answered within the server's timeout")]


def json_response(status: int, body: bytes, retry_after: int | None = None) -> Response:
    """``body`` (JSON already) as the answer, with ``Retry-After`` when given.

    Example:
        >>> json_response(503, b'{}', retry_after=1).headers["retry-after"]
        '1'
    """
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return Response(body, status, headers=headers, media_type="application/json")


def error(status: int, message: str, errors: list[dict[str, Any]] | None = None,
          retry_after: int | None = None) -> Response:
    """An error answer of ``/predict`` and the probes: ``{"detail": message}`` (and the field ``errors``)."""
    return json_response(status, error_body(message, errors), retry_after)


def counted(models: ServedModels, handle: Handler, route: str,
            fail: Callable[[int, str], Response] | None = None) -> Handler:
    """``handle`` with the request counted in its model's metrics (status, latency, in flight) and never a
    bare 500 page: an unexpected error is logged and answered as JSON (by ``fail``), and the server keeps
    serving. A request for a model not served is answered but not counted."""
    fail = fail or error

    async def counted_handler(request: Request) -> Response:
        slot = models.slot_for(request.path_params)
        if slot is None:
            return await handle(request)
        slot.in_flight += 1
        started = time.perf_counter()
        status: int | None = 500
        try:
            response = await handle(request)
            status = response.status_code
            return response
        except ClientDisconnect:  # the client's doing: nobody is there to answer
            if request.scope.get("torchwork.body_timeout"):  # the connection guard answered 408 and closed
                status = 408
            else:
                status = None
                slot.metrics.client_disconnects.inc()
                client = request.client
                logger.info("the client %s disconnected before sending its whole request body; not answered",
                            f"{client.host}:{client.port}" if client else "")
            return fail(400, "the client disconnected")
        except Exception:
            logger.exception("unexpected error in POST %s", route)
            return fail(500, "internal error while answering this request; the server keeps serving")
        finally:
            slot.in_flight -= 1
            if status is not None:
                slot.metrics.requests.inc(str(status))
                slot.metrics.latency.observe(time.perf_counter() - started)

    return counted_handler


def _not_json(content_type: str | None) -> Response | None:
    """The 415 answer to a body not declared as JSON; None when it is."""
    if content_type is not None and content_type.partition(";")[0].strip().lower() == "application/json":
        return None
    # A browser sends text/plain (or a form) cross-origin without asking first: refuse all but JSON.
    return error(415, f"Content-Type {content_type!r} is not accepted: send the body as JSON with the "
                      "header 'Content-Type: application/json'" if content_type is not None else
                      "no Content-Type header: send the body as JSON with the header "
                      "'Content-Type: application/json'")


async def predict(models: ServedModels, request: Request) -> Response:
    """``POST /predict``: validate the items, queue them on the single model's batcher, await the answer."""
    refused = _not_json(request.headers.get("content-type"))
    if refused is not None:
        return refused
    single = models.single
    assert single is not None  # the route is there only for a single model
    if not single.state.ready.is_set():
        return error(503, "the model is still warming up; retry shortly", retry_after=1)
    body = await read_body(request, single.state.config.max_body_bytes)
    if isinstance(body, str):
        return error(400 if body.startswith("header") else 413, body)
    state = single.state  # after the body came: nothing awaits from here to submit, so a reload that
    # switched versions meanwhile is seen, and the old version's batcher is never handed a request
    try:
        # request_model() builds the class at run time, with its one field `inputs`.
        items = state.request_schema.model_validate_json(body).inputs
    except ValidationError as problem:
        return error(422, validation_message(problem), validation_errors(problem))
    if state.predictor.kind == "tensor":
        problem_text = check_rectangular(items, state.predictor.item_shape)
        if problem_text:
            return error(422, problem_text)
    try:
        job = state.batcher.submit(items)
    except QueueFullError as full:
        return error(503, f"the server is busy: {full}", retry_after=1)
    state.deadlines.add(job)
    status, payload = await job
    return json_response(status, payload)


def add_predict_route(app: FastAPI, models: ServedModels) -> None:
    """``POST /predict`` for the single model, documented with its request and answer schemas."""
    single = models.single
    assert single is not None
    served = single.state.predictor
    error_schema = response_models(None)[1]

    async def handle(request: Request) -> Response:
        return await predict(models, request)

    app.router.add_api_route(
        "/predict", counted(models, handle, "/predict"), methods=["POST"], summary="Predict a batch of items",
        description=f"Body: {{\"inputs\": [item, ...]}} with 1 to {single.state.config.max_items} items. Answers "
                    "{\"predictions\": [...]}, one per item in order"
                    + (", each with the label and the probability of every class." if served.labels
                       else ", each with the model's output."),
        responses={200: {"model": response_models(served.labels)[0], "description": "one prediction per item"},
                   **{code: {"model": error_schema, "description": text} for code, text in _PREDICT_ERRORS}},
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": single.state.request_schema.model_json_schema()}}}}, route_class_override=RawRoute)


def add_probe_routes(app: FastAPI, models: ServedModels, server_parts: Sequence[Any]) -> None:
    """``/healthz``, ``/readyz`` and ``/metrics`` (``server_parts``: the server's own metrics, after the
    models')."""
    error_schema = response_models(None)[1]

    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    async def readyz() -> Response:
        if models.all_ready():
            return json_response(200, b'{"status": "ready"}')
        return error(503, "the model is warming up", retry_after=1)

    async def metrics_page() -> PlainTextResponse:
        single = models.single
        if single is not None:
            text = "\n".join(part.render() for part in [*single.metrics.parts(), *server_parts]) + "\n"
        else:
            text = render_models([(slot.name, slot.metrics) for slot in models.slots.values()], server_parts)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    app.add_api_route("/healthz", healthz, methods=["GET"], summary="The process is alive")
    app.add_api_route("/readyz", readyz, methods=["GET"], summary="Every model is loaded and warmed up",
                      responses={503: {"model": error_schema}})
    app.add_api_route("/metrics", metrics_page, methods=["GET"], summary="Prometheus metrics",
                      response_class=PlainTextResponse)
