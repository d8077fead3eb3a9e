"""The models one server serves: a :class:`~torchwork.serve.repository.Slot` each, with its own settings,
the lifespan that starts and stops them, and reloads (SIGHUP, or the model control route).

The app (:func:`torchwork.serve.create_app`) builds one :class:`ServedModels` and hands it to its routes:
``/predict`` serves :attr:`ServedModels.single`, the ``/v2`` routes :meth:`ServedModels.find` a model by name.

Example:
    >>> import torch
    >>> from torchwork.serve import ServeConfig, TorchPredictor
    >>> from torchwork.serve.repository import ModelSpec
    >>> tiny = TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,))
    >>> models = ServedModels([ModelSpec("a", "1", tiny), ModelSpec("b", "7", tiny)], ServeConfig())
    >>> models.listing()
    [('a', '1', 'LOADING'), ('b', '7', 'LOADING')]
    >>> models.find("b", None).v2.version, models.single is None
    ('7', True)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from torchwork.errors import ConfigError
from torchwork.serve.config import ServeConfig
from torchwork.serve.inference_protocol import ProtocolError
from torchwork.serve.keys import KeyCheck
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.model_process import ModelProcess
from torchwork.serve.model_state import ModelState, warm_up, warm_up_all
from torchwork.serve.predictor import ServedModel
from torchwork.serve.repository import MODEL_SETTINGS, ModelSpec, Slot, check_name
from torchwork.serve.schemas import Limits
from torchwork.serve.v2_model import V2Model

logger = logging.getLogger("torchwork.serve")


class ServedModels:
    """``specs``' models, each in a :class:`Slot` with its own settings (``ModelSpec.limits`` over
    ``config``'s); ``keys`` are read again at SIGHUP; ``on_ready()`` is called once every model is warm."""

    def __init__(self, specs: Sequence[ModelSpec], config: ServeConfig, keys: KeyCheck | None = None,
                 on_ready: Callable[[], None] | None = None) -> None:
        check_specs(specs)
        self.config, self.keys, self.on_ready = config, keys, on_ready
        config.check_numbers()  # again: a config's fields can be set after it was built and checked
        self.configs = {spec.name: dataclasses.replace(config, **spec.limits) if spec.limits else config
                        for spec in specs}
        self.slots: dict[str, Slot] = {}
        for spec in specs:
            metrics = self._metrics(spec.name)
            state = self.new_state(spec.name, spec.version, spec.predictor, spec.model_process, metrics)
            self.slots[spec.name] = Slot(spec.name, state, metrics, spec.reload, spec.newest, spec.root)
        # The one model /predict serves; None when there are several.
        self.single = next(iter(self.slots.values())) if len(self.slots) == 1 else None

    def _metrics(self, name: str) -> ServerMetrics:
        """A model's metrics; its gauges read the slot's state serving now, whichever version that is."""
        return ServerMetrics(self.configs[name].max_batch_size, lambda: self.slots[name].state.batcher.queued_items,
                             lambda: self.slots[name].in_flight)

    def new_state(self, name: str, version: str, served: ServedModel, process: ModelProcess | None,
                  metrics: ServerMetrics) -> ModelState:
        """A (not yet started) state serving ``version`` of model ``name``, with that model's settings."""
        own = self.configs[name]
        bound = getattr(served, "max_free_dim", None)  # an artifact's exported length bound
        limits = Limits(max_items=own.max_items, max_text_length=own.max_text_length,
                        **({"max_free_dim": min(bound, Limits.max_free_dim)} if bound else {}))
        return ModelState(served, own, process, V2Model(name, version, served, limits), metrics)

    async def start(self, slot: Slot, version: str, served: ServedModel, process: ModelProcess | None,
                    ) -> ModelState:
        """A new version's state, started and warmed up (what a reload switches to)."""
        state = self.new_state(slot.name, version, served, process, slot.metrics)
        try:
            await state.open()
            await asyncio.get_running_loop().run_in_executor(None, warm_up, state, True)
        except BaseException:
            await state.close()
            raise
        return state

    async def reload(self, name: str, version: str | None) -> str:
        """Load ``version`` (None: the newest) of model ``name`` and switch to it; the version serving now."""
        slot = self.slots[name]
        return await slot.swap(version, lambda v, p, m: self.start(slot, v, p, m), self.configs[name].timeout_s)

    def reload_all(self) -> None:
        """SIGHUP: read the keys again, and reload every model whose folder has a version not serving yet."""
        if self.keys is not None:
            self.keys.rotate()
        for slot in self.slots.values():
            newest = slot.newest() if slot.newest is not None else None
            if slot.reload is not None and newest != slot.state.v2.version:  # None: unknown, load anyway
                task = asyncio.ensure_future(self.reload(slot.name, None))
                task.add_done_callback(_log_reload)
                slot.retiring.add(task)
                task.add_done_callback(slot.retiring.discard)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """The app's lifespan: start every model, warm them up on a thread, and stop them at shutdown."""
        for slot in self.slots.values():  # a model that cannot be built stops the server here, with the reason
            await slot.state.open()
        if self.keys is not None or any(slot.reload is not None for slot in self.slots.values()):
            _on_hangup(self.reload_all)
        states = [slot.state for slot in self.slots.values()]
        threading.Thread(target=warm_up_all, args=(states, self.on_ready), name="torchwork-warm-up",
                         daemon=True).start()
        yield
        # uvicorn has already let in-flight requests finish; end the batchers after anything left.
        for slot in self.slots.values():
            await asyncio.gather(*slot.retiring, return_exceptions=True)
            await slot.state.batcher.shutdown(self.configs[slot.name].timeout_s)

    def find(self, name: str, version: str | None) -> ModelState:
        """The state serving model ``name`` (at ``version``, if given), else a :class:`ProtocolError` (404)."""
        slot = self.slots.get(name)
        if slot is None:
            raise ProtocolError(404, f"no model {name!r} here; this server serves {sorted(self.slots)}")
        serving = slot.state.v2.version
        if version is not None and version != serving:
            raise ProtocolError(404, f"model {name!r} has no version {version!r} loaded; version "
                                     f"{serving!r} serves")
        return slot.state

    def listing(self) -> list[tuple[str, str, str]]:
        """(name, version, ``READY`` or ``LOADING``) of every version served or being loaded."""
        rows = []
        for slot in self.slots.values():
            rows.append((slot.name, slot.state.v2.version, "READY" if slot.state.ready.is_set() else "LOADING"))
            if slot.loading is not None:
                rows.append((slot.name, slot.loading, "LOADING"))
        return rows

    def slot_for(self, path_params: Mapping[str, Any]) -> Slot | None:
        """The slot a request's path names (``{name}``; none: the single model), or None when not served."""
        if self.single is not None and "name" not in path_params:
            return self.single
        return self.slots.get(path_params.get("name", ""))

    def all_ready(self) -> bool:
        """Every model is loaded and warmed up."""
        return all(slot.state.ready.is_set() for slot in self.slots.values())


def check_specs(specs: Sequence[ModelSpec]) -> None:
    """A :class:`ConfigError` for a spec that is not servable: no predictor, a bad or repeated name or
    version, or a setting a model may not have its own of."""
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


def _log_reload(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("SIGHUP: %s", task.exception())


def _on_hangup(callback: Callable[[], None]) -> None:
    """Call ``callback`` on the event loop at each SIGHUP (where the platform and thread allow a handler)."""
    import signal

    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, callback)
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):  # not POSIX, or not the main thread
        logger.warning("SIGHUP cannot be handled here; restart the server to read its API keys again")
