"""The FastAPI application: ``POST /predict``, ``/healthz``, ``/readyz``, ``/metrics``, docs at ``/docs`` (with
``--docs``), and
the Open Inference Protocol's ``/v2`` routes (:mod:`torchwork.serve.v2_routes`) through the same batcher.

This module imports FastAPI; only the serving code path imports it.

Example (building the app does not start a server; :func:`torchwork.serve.serve` does):
    >>> import torch
    >>> from torchwork.serve import ServeConfig, TorchPredictor, create_app
    >>> predictor = TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,), labels=["a", "b", "c"])
    >>> app = create_app(predictor, ServeConfig(max_batch_size=16))
    >>> sorted(path for path in app.openapi()["paths"] if not path.startswith("/v2/"))
    ['/healthz', '/metrics', '/predict', '/readyz', '/v2']
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from torchwork.errors import ConfigError, QueueFullError
from torchwork.serve.batcher import Batcher
from torchwork.serve.batching import Batching
from torchwork.serve.config import ServeConfig
from torchwork.serve.connections import ConnectionGuard
from torchwork.serve.encoding import answer, prediction_fragments
from torchwork.serve.heap import settle_heap
from torchwork.serve.inference_protocol import ProtocolError
from torchwork.serve.keys import KeyCheck, KeyGuard
from torchwork.serve.metrics import ServerMetrics, render_models
from torchwork.serve.model_process import ModelProcess
from torchwork.serve.predictor import ServedModel
from torchwork.serve.process_batcher import ProcessBatcher
from torchwork.serve.raw_route import RawRoute
from torchwork.serve.repository import MODEL_SETTINGS, ModelSpec, Slot, check_name
from torchwork.serve.request_body import read_body
from torchwork.serve.schemas import (
    Limits,
    check_rectangular,
    error_body,
    request_model,
    response_models,
    validation_errors,
    validation_message,
)
from torchwork.serve.v2_model import V2Model
from torchwork.serve.v2_routes import add_model_control, add_v2_routes

logger = logging.getLogger("torchwork.serve")


class _State:
    """One model version being served: its predictor, batcher, deadlines, readiness and /v2 description."""

    def __init__(self, predictor: ServedModel, config: ServeConfig, model_process: ModelProcess | None,
                 v2: V2Model, metrics: ServerMetrics) -> None:
        self.predictor = predictor
        self.v2 = v2
        self.config = config
        self.model_process = model_process
        self.ready = threading.Event()
        fragments = prediction_fragments(predictor.labels)
        self.run_batch = lambda items: fragments(predictor.predict_batch(items))
        options: dict[str, Any] = {"max_batch_size": config.max_batch_size, "max_wait_s": config.max_wait_ms / 1000,
                   "max_queue": config.max_queue, "cost": request_cost(predictor)}
        # A predictor that holds no model (its tokenizer is loaded in the model process only) never runs here.
        self.remote_only = bool(getattr(predictor, "runs_in_model_process", False))
        if self.remote_only and model_process is None:
            raise ConfigError(f"{getattr(predictor, 'name', predictor)} runs in a model process only; serve it "
                              "with one (--model-process)")
        self.batcher: Batching = (Batcher(self.run_batch, answer, **options) if model_process is None else
                                 ProcessBatcher(model_process, answer, run_inline=self.run_batch,
                                                pack=_packer(predictor), inline=not self.remote_only, **options))
        self.metrics = metrics
        self.batcher.metrics = metrics
        self.deadlines = Deadlines(config.timeout_s)
        limits = v2.limits
        self.request_schema: Any = request_model(predictor.kind, predictor.item_shape, predictor.dtype, limits)

    async def open(self) -> None:
        """Start the model process (a model that cannot be built raises here, with the reason) and the batcher."""
        if self.model_process is not None and self.model_process.pid is None:  # serve() may have started it
            sizes = sorted({1, self.config.max_batch_size})  # the child warms itself up at these batch sizes
            await asyncio.get_running_loop().run_in_executor(None, self.model_process.start, sizes)
        await self.batcher.open()


class Deadlines:
    """Answer 504 to requests not answered within ``timeout_s``.

    One sweep every ``every_s`` over the requests in arrival order (the timeout is the same for all, so
    their deadlines are in order too) costs less per request than a timer each, which matters at thousands
    of requests per second; an expiry is at most ``every_s`` late.
    """

    def __init__(self, timeout_s: float, every_s: float = 0.05) -> None:
        self.timeout_s, self.every_s = timeout_s, every_s
        self._jobs: collections.deque[tuple[float, Any]] = collections.deque()
        self._sweeping = False

    def add(self, job: Any) -> None:
        """Watch ``job`` (on the event loop)."""
        self._jobs.append((time.monotonic() + self.timeout_s, job))
        if not self._sweeping:
            self._sweeping = True
            asyncio.get_running_loop().call_later(self.every_s, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        while self._jobs and (self._jobs[0][1].future.done() or self._jobs[0][0] <= now):
            _, job = self._jobs.popleft()
            _expire(job, self.timeout_s)
        self._sweeping = bool(self._jobs)
        if self._sweeping:
            asyncio.get_running_loop().call_later(self.every_s, self._sweep)


# A text item costs about one unit plus one per this many characters (a tweet: about two units).
CHARACTERS_PER_UNIT = 100


def request_cost(predictor: ServedModel) -> Callable[[Sequence[Any]], float]:
    """The work a request's items are, in units of a short item: what decides whether it may run inline.

    Example:
        >>> import torch
        >>> from torchwork.serve import TorchPredictor
        >>> request_cost(TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,)))([[0.0] * 4] * 8)
        8
    """
    if predictor.kind == "text":
        return lambda items: len(items) + sum(map(len, items)) / CHARACTERS_PER_UNIT
    return len


def _packer(predictor: ServedModel) -> Callable[[list[Any]], Any]:
    """How a batch travels to the model process: fixed-shape tensors as one array (a fast pickle)."""
    if predictor.kind != "tensor" or None in predictor.item_shape:
        return list
    import numpy as np

    from torchwork.serve.predictor import numpy_dtype

    dtype = numpy_dtype(predictor.dtype)
    return lambda items: np.asarray(items, dtype=dtype)


def create_app(predictor: ServedModel | None, config: ServeConfig | None = None,
               model_process: ModelProcess | None = None, on_ready: Callable[[], None] | None = None,
               name: str = "model", version: str = "1", keys: KeyCheck | None = None,
               models: Sequence[ModelSpec] = ()) -> FastAPI:
    """Build the FastAPI app serving ``predictor``: schemas from its declared input, a dynamic batcher.

    ``model_process``: run batches there (a :class:`ProcessBatcher` on the event loop; what ``torchwork
    serve`` does by default) instead of on a thread of this process; ``predictor`` still declares the input
    and answers small lone requests of a fast model on the event loop. ``on_ready()`` is called once the
    model is warmed up and requests are answered (``/readyz`` says 200). ``name`` and ``version``: what the
    Open Inference Protocol's routes call the model (``/v2/models/NAME/versions/VERSION/infer``). ``keys``:
    every route but the health probes needs one of them (:mod:`torchwork.serve.keys`); SIGHUP reads them again.
    ``models``: serve these instead of ``predictor`` (``None``), each with its own batcher, model process,
    limits (``ModelSpec.limits``, over ``config``'s) and metrics (:mod:`torchwork.serve.repository`);
    ``POST /predict`` is there only for a single model.
    """
    config = config or ServeConfig()
    specs = list(models) or [ModelSpec(name, version, predictor, model_process)]
    for spec in specs:
        if not isinstance(spec.predictor, ServedModel):
            raise ConfigError(f"{spec.predictor!r} is not a predictor: it needs kind, item_shape, dtype, labels and "
                              "predict_batch(items); build one with TorchPredictor or OnnxPredictor.")
        check_name(spec.name)
        check_name(spec.version, "version")
    if len({spec.name for spec in specs}) != len(specs):
        raise ConfigError(f"model names {[spec.name for spec in specs]}: each model needs its own name")
    # Each model's own settings (batch size, payload size, queue...) over the server's, checked as ServeConfig
    # checks them; the connection guard and keys are the server's.
    for spec in specs:
        unknown = sorted(set(spec.limits) - set(MODEL_SETTINGS))
        if unknown:
            raise ConfigError(f"model {spec.name!r}: {unknown} are not settings a model may have its own of; "
                              f"those are {', '.join(MODEL_SETTINGS)}")
    configs = {spec.name: dataclasses.replace(config, **spec.limits) if spec.limits else config for spec in specs}
    guard = ConnectionGuard(head_timeout_s=config.head_timeout_s, body_timeout_s=config.body_timeout_s,
                            idle_timeout_s=config.idle_timeout_s, max_connections=config.max_connections)
    slots: dict[str, Slot] = {}

    def new_state(spec_name: str, spec_version: str, served: ServedModel, process: ModelProcess | None,
                  metrics: ServerMetrics) -> _State:
        own = configs[spec_name]
        bound = getattr(served, "max_free_dim", None)  # an artifact's exported length bound
        limits = Limits(max_items=own.max_items, max_text_length=own.max_text_length,
                        **({"max_free_dim": min(bound, Limits.max_free_dim)} if bound else {}))
        return _State(served, own, process, V2Model(spec_name, spec_version, served, limits), metrics)

    for spec in specs:
        slot_metrics = _slot_metrics(configs[spec.name].max_batch_size, slots, spec.name)
        slots[spec.name] = Slot(spec.name, new_state(spec.name, spec.version, spec.predictor, spec.model_process,
                                                     slot_metrics), slot_metrics, spec.reload, spec.newest,
                                spec.root)
    single = next(iter(slots.values())) if len(slots) == 1 else None
    server_parts: list[Any] = [guard, *([keys] if keys is not None else [])]

    async def start(version_name: str, served: ServedModel, process: ModelProcess | None, slot: Slot) -> _State:
        """A new version's state, started and warmed up (what a reload switches to)."""
        state = new_state(slot.name, version_name, served, process, slot.metrics)
        try:
            await state.open()
            await asyncio.get_running_loop().run_in_executor(None, _warm_up, state, True)
        except BaseException:
            if state.batcher.rule.loop is not None:  # opened: stop it (and its model process)
                await state.batcher.shutdown(1.0)
            elif process is not None:
                await asyncio.get_running_loop().run_in_executor(None, process.close)
            raise
        return state

    async def reload(slot_name: str, version_name: str | None) -> str:
        slot = slots[slot_name]
        return await slot.swap(version_name, lambda v, p, m: start(v, p, m, slot), configs[slot_name].timeout_s)

    def reload_all() -> None:
        if keys is not None:
            keys.rotate()
        for slot in slots.values():
            newest = slot.newest() if slot.newest is not None else None
            if slot.reload is not None and newest != slot.state.v2.version:  # None: unknown, load anyway
                task = asyncio.ensure_future(reload(slot.name, None))
                task.add_done_callback(_log_reload)
                slot.retiring.add(task)
                task.add_done_callback(slot.retiring.discard)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for slot in slots.values():  # a model that cannot be built stops the server here, with the reason
            await slot.state.open()
        if keys is not None or any(slot.reload is not None for slot in slots.values()):
            _on_hangup(reload_all)
        states = [slot.state for slot in slots.values()]
        threading.Thread(target=_warm_up_all, args=(states, on_ready), name="torchwork-warm-up", daemon=True).start()
        yield
        # uvicorn has already let in-flight requests finish; end the batchers after anything left.
        for slot in slots.values():
            await asyncio.gather(*slot.retiring, return_exceptions=True)
            await slot.state.batcher.shutdown(configs[slot.name].timeout_s)

    description = ", ".join(f"{spec.name} ({spec.predictor.kind} input)" for spec in specs)
    # The docs page loads Swagger UI from a public CDN (a third party's code in the operator's browser, broken
    # offline), so it and the schema are served only when asked for; ReDoc and the OAuth2 page never. No
    # trailing-slash redirects: Starlette builds their Location from the request's Host header.
    app = FastAPI(title="torchwork serve", lifespan=lifespan, redirect_slashes=False,
                  docs_url="/docs" if config.docs else None, openapi_url="/openapi.json" if config.docs else None,
                  redoc_url=None, swagger_ui_oauth2_redirect_url=None,
                  description=f"Predictions from {description}, batched dynamically.")
    app.state.torchwork = next(iter(slots.values())).state
    app.state.torchwork_guard = guard
    app.state.torchwork_slots = slots
    if keys is not None:
        app.add_middleware(KeyGuard, check=keys)

    def answer(status: int, body: bytes, retry_after: int | None = None) -> Response:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        return Response(body, status, headers=headers, media_type="application/json")

    def error(status: int, message: str, errors: list[dict[str, Any]] | None = None,
              retry_after: int | None = None) -> Response:
        return answer(status, error_body(message, errors), retry_after)

    def counted(handle: Callable[[Request], Awaitable[Response]], route: str,
                fail: Callable[[int, str], Response] | None = None) -> Callable[[Request], Awaitable[Response]]:
        """``handle`` with the request counted in its model's metrics (status, latency, in flight) and never a
        bare 500 page: an unexpected error is logged and answered as JSON (by ``fail``), and the server keeps
        serving. A request for a model not served is answered but not counted."""
        fail = fail or error

        async def counted_handler(request: Request) -> Response:
            slot = single if single is not None and "name" not in request.path_params else \
                slots.get(request.path_params.get("name", ""))
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

    async def handle(request: Request) -> Response:
        content_type = request.headers.get("content-type")
        if content_type is None or content_type.partition(";")[0].strip().lower() != "application/json":
            # A browser sends text/plain (or a form) cross-origin without asking first: refuse all but JSON.
            return error(415, f"Content-Type {content_type!r} is not accepted: send the body as JSON with the "
                              "header 'Content-Type: application/json'" if content_type is not None else
                              "no Content-Type header: send the body as JSON with the header "
                              "'Content-Type: application/json'")
        assert single is not None  # the route is there only for a single model
        if not single.state.ready.is_set():
            return error(503, "the model is still warming up; retry shortly", retry_after=1)
        body = await read_body(request, single.state.config.max_body_bytes)
        if isinstance(body, str):
            status = 400 if body.startswith("header") else 413
            return error(status, body)
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
        return answer(status, payload)

    error_schema = response_models(None)[1]
    if single is not None:
        served = single.state.predictor
        response_schema = response_models(served.labels)[0]
        error_responses: dict[int | str, dict[str, Any]] = {
            code: {"model": error_schema, "description": text}
            for code, text in [(400, "bad request headers"), (408, "the request's head or body came too slowly"),
                               (413, "body larger than the server allows"),
                               (415, "the body is not declared as JSON (Content-Type: application/json)"),
                               (422, "invalid input; the message names the field"),
                               (503, "not ready, or the queue is full (see Retry-After)"),
                               (504, "not answered within the server's timeout")]}
        app.router.add_api_route(
            "/predict", counted(handle, "/predict"), methods=["POST"], summary="Predict a batch of items",
            description=f"Body: {{\"inputs\": [item, ...]}} with 1 to {single.state.config.max_items} items. Answers "
                        "{\"predictions\": [...]}, one per item in order"
                        + (", each with the label and the probability of every class." if served.labels
                           else ", each with the model's output."),
            responses={200: {"model": response_schema, "description": "one prediction per item"},
                       **error_responses},
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                "schema": single.state.request_schema.model_json_schema()}}}}, route_class_override=RawRoute)

    def find(model_name: str, model_version: str | None) -> _State:
        slot = slots.get(model_name)
        if slot is None:
            raise ProtocolError(404, f"no model {model_name!r} here; this server serves {sorted(slots)}")
        serving = slot.state.v2.version
        if model_version is not None and model_version != serving:
            raise ProtocolError(404, f"model {model_name!r} has no version {model_version!r} loaded; version "
                                     f"{serving!r} serves")
        return slot.state

    def listing() -> list[tuple[str, str, str]]:
        rows = []
        for slot in slots.values():
            rows.append((slot.name, slot.state.v2.version, "READY" if slot.state.ready.is_set() else "LOADING"))
            if slot.loading is not None:
                rows.append((slot.name, slot.loading, "LOADING"))
        return rows

    # Starlette tries the routes in order: the infer routes come right after /predict, before the probes and
    # the metadata routes, so that each inference request pays for one failed match at most.
    from torchwork import __version__

    add_v2_routes(app, find, listing, counted, __version__)

    @app.get("/healthz", summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/readyz", summary="Every model is loaded and warmed up", responses={503: {"model": error_schema}})
    async def readyz() -> Response:
        if all(slot.state.ready.is_set() for slot in slots.values()):
            return answer(200, b'{"status": "ready"}')
        return error(503, "the model is warming up", retry_after=1)

    @app.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
    async def metrics_page() -> PlainTextResponse:
        if single is not None:
            text = "\n".join(part.render() for part in [*single.metrics.parts(), *server_parts]) + "\n"
        else:
            text = render_models([(slot.name, slot.metrics) for slot in slots.values()], server_parts)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    add_model_control(app, lambda model_name: model_name in slots, reload, config.enable_model_control,
                      config.model_control_remote)
    return app


def _slot_metrics(max_batch_size: int, slots: dict[str, Slot], name: str) -> ServerMetrics:
    """A model's metrics; its gauges read the slot's state serving now, whichever version that is."""
    return ServerMetrics(max_batch_size, lambda: slots[name].state.batcher.queued_items,
                         lambda: slots[name].in_flight)


def _log_reload(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("SIGHUP: %s", task.exception())


def _warm_up_all(states: list[_State], on_ready: Callable[[], None] | None) -> None:
    for state in states:
        _warm_up(state)
    if on_ready is not None:
        on_ready()


def _on_hangup(callback: Callable[[], None]) -> None:
    """Call ``callback`` on the event loop at each SIGHUP (where the platform and thread allow a handler)."""
    import signal

    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, callback)
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):  # not POSIX, or not the main thread
        logger.warning("SIGHUP cannot be handled here; restart the server to read its API keys again")


def _expire(job: Any, timeout_s: float) -> None:
    if not job.future.done():
        job.cancel()
        job.future.set_result((504, error_body(
            f"no prediction within {timeout_s:g} s (the server's --timeout-s); the server is overloaded or "
            "the model is slow: retry later, or send fewer items")))


def _warm_up(state: _State, strict: bool = False) -> None:
    """Run the model once at batch size 1 and once at the largest, then freeze the heap and say ready (never
    when this failed).

    With a model process, batches run there (it warmed itself up); this process's copy answers only lone
    requests, so it is warmed at batch size 1 alone.

    Then :func:`~torchwork.serve.heap.settle_heap`: the heap frozen, young collections rarer. ``strict``
    (a reload): a failure raises, and the version is not switched to.
    """
    examples = getattr(state.predictor, "example_items", None)
    sizes = [1] if state.model_process is not None else sorted({1, state.config.max_batch_size})
    try:
        if state.remote_only:  # no model here: the model process warmed itself up, and its rows say the rest
            state.v2.learn_outputs(state.model_process.probe_rows)  # type: ignore[union-attr]
        elif callable(examples):
            state.v2.learn_outputs(state.predictor.predict_batch(examples(1)))
            for size in sizes:
                state.run_batch(examples(size))
    except Exception:
        if strict:
            raise
        logger.exception("model %s: the warm-up failed, so it is never reported ready (/readyz and "
                         "/v2/health/ready answer 503); fix the model and restart", state.v2.name)
        return
    settle_heap()
    state.ready.set()
