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

import functools
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI

from torchwork.serve.config import ServeConfig
from torchwork.serve.connections import ConnectionGuard
from torchwork.serve.keys import KeyCheck, KeyGuard
from torchwork.serve.model_process import ModelProcess
from torchwork.serve.predictor import ServedModel
from torchwork.serve.repository import ModelSpec
from torchwork.serve.routes import add_predict_route, add_probe_routes, counted
from torchwork.serve.served_models import ServedModels
from torchwork.serve.v2_routes import add_model_control, add_v2_routes


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
    served = ServedModels(specs, config, keys, on_ready)
    guard = ConnectionGuard(head_timeout_s=config.head_timeout_s, body_timeout_s=config.body_timeout_s,
                            idle_timeout_s=config.idle_timeout_s, max_connections=config.max_connections)
    server_parts: list[Any] = [guard, *([keys] if keys is not None else [])]
    description = ", ".join(f"{spec.name} ({spec.predictor.kind} input)" for spec in specs)
    # The docs page loads Swagger UI from a public CDN (a third party's code in the operator's browser, broken
    # offline), so it and the schema are served only when asked for; ReDoc and the OAuth2 page never. No
    # trailing-slash redirects: Starlette builds their Location from the request's Host header.
    app = FastAPI(title="torchwork serve", lifespan=served.lifespan, redirect_slashes=False,
                  docs_url="/docs" if config.docs else None, openapi_url="/openapi.json" if config.docs else None,
                  redoc_url=None, swagger_ui_oauth2_redirect_url=None,
                  description=f"Predictions from {description}, batched dynamically.")
    app.state.torchwork = next(iter(served.slots.values())).state
    app.state.torchwork_guard = guard
    app.state.torchwork_slots = served.slots
    if keys is not None:
        app.add_middleware(KeyGuard, check=keys)
    if served.single is not None:
        add_predict_route(app, served)
    # Starlette tries the routes in order: the infer routes come right after /predict, before the probes and
    # the metadata routes, so that each inference request pays for one failed match at most.
    from torchwork import __version__

    add_v2_routes(app, served.find, served.listing, functools.partial(counted, served), __version__)
    add_probe_routes(app, served, server_parts)
    add_model_control(app, lambda model_name: model_name in served.slots, served.reload,
                      config.enable_model_control, config.model_control_remote)
    return app
