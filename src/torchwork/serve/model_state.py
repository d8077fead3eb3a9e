"""One model version being served: its predictor, batcher, deadlines, request schema, readiness and warm-up.

A reload builds a new :class:`ModelState` beside the one serving, warms it up and switches to it
(:mod:`torchwork.serve.repository`); ``/predict`` and the ``/v2`` routes read everything a request needs
from the state they find.

Example:
    >>> import torch
    >>> from torchwork.serve import ServeConfig, TorchPredictor
    >>> from torchwork.serve.metrics import ServerMetrics
    >>> from torchwork.serve.schemas import Limits
    >>> from torchwork.serve.v2_model import V2Model
    >>> predictor = TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,))
    >>> state = ModelState(predictor, ServeConfig(), None, V2Model("m", "1", predictor, Limits()),
    ...                    ServerMetrics(8, lambda: 0, lambda: 0))
    >>> state.ready.is_set()  # until warm_up(state) has run the model
    False
    >>> state.request_schema.model_validate_json('{"inputs": [[1, 2, 3, 4]]}').inputs
    [[1.0, 2.0, 3.0, 4.0]]
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from torchwork.errors import ConfigError
from torchwork.serve.batcher import Batcher
from torchwork.serve.batching import Batching
from torchwork.serve.config import ServeConfig
from torchwork.serve.deadlines import Deadlines
from torchwork.serve.encoding import answer, prediction_fragments
from torchwork.serve.heap import settle_heap
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.model_process import ModelProcess
from torchwork.serve.predictor import ServedModel
from torchwork.serve.process_batcher import ProcessBatcher
from torchwork.serve.schemas import request_model
from torchwork.serve.v2_model import V2Model

logger = logging.getLogger("torchwork.serve")

# A text item costs about one unit plus one per this many characters (a tweet: about two units).
CHARACTERS_PER_UNIT = 100


class ModelState:
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
                                                 pack=packer(predictor), inline=not self.remote_only, **options))
        self.metrics = metrics
        self.batcher.metrics = metrics
        self.deadlines = Deadlines(config.timeout_s)
        self.request_schema: Any = request_model(predictor.kind, predictor.item_shape, predictor.dtype, v2.limits)

    async def open(self) -> None:
        """Start the model process (a model that cannot be built raises here, with the reason) and the batcher."""
        if self.model_process is not None and self.model_process.pid is None:  # serve() may have started it
            sizes = sorted({1, self.config.max_batch_size})  # the child warms itself up at these batch sizes
            await asyncio.get_running_loop().run_in_executor(None, self.model_process.start, sizes)
        await self.batcher.open()

    async def close(self) -> None:
        """Stop what :meth:`open` started (or began to): the batcher and the model process."""
        if self.batcher.rule.loop is not None:  # opened: stopping the batcher stops its model process too
            await self.batcher.shutdown(1.0)
        elif self.model_process is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.model_process.close)


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


def packer(predictor: ServedModel) -> Callable[[list[Any]], Any]:
    """How a batch travels to the model process: fixed-shape tensors as one array (a fast pickle)."""
    if predictor.kind != "tensor" or None in predictor.item_shape:
        return list
    import numpy as np

    from torchwork.serve.predictor import numpy_dtype

    dtype = numpy_dtype(predictor.dtype)
    return lambda items: np.asarray(items, dtype=dtype)


def warm_up(state: ModelState, strict: bool = False) -> None:
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


def warm_up_all(states: list[ModelState], on_ready: Callable[[], None] | None) -> None:
    """Warm up each state in turn (on a thread of its own), then call ``on_ready``."""
    for state in states:
        warm_up(state)
    if on_ready is not None:
        on_ready()
