"""serve/model_state.py: one served version's batcher, schema and cost rule; a failed warm-up never says ready."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from torchwork.errors import ConfigError
from torchwork.serve import ServeConfig, TorchPredictor
from torchwork.serve.batcher import Batcher
from torchwork.serve.metrics import ServerMetrics
from torchwork.serve.model_state import CHARACTERS_PER_UNIT, ModelState, packer, request_cost, warm_up
from torchwork.serve.schemas import Limits
from torchwork.serve.v2_model import V2Model


def state_of(predictor, config=None, process=None) -> ModelState:
    return ModelState(predictor, config or ServeConfig(max_batch_size=4), process,
                      V2Model("m", "1", predictor, Limits()), ServerMetrics(4, lambda: 0, lambda: 0))


def test_a_state_batches_on_a_thread_with_the_configs_settings():
    state = state_of(TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,)))
    assert isinstance(state.batcher, Batcher) and state.batcher.metrics is state.metrics
    assert state.deadlines.timeout_s == ServeConfig().timeout_s and not state.ready.is_set()
    asyncio.run(state.close())  # never opened: nothing to stop


def test_a_predictor_that_runs_only_in_a_model_process_needs_one():
    predictor = TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,))
    predictor.runs_in_model_process = True  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="--model-process"):
        state_of(predictor)


def test_a_text_items_cost_grows_with_its_length_and_a_tensors_is_one():
    text = TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,))
    text.kind = "text"  # type: ignore[misc]
    assert request_cost(text)(["x" * CHARACTERS_PER_UNIT] * 2) == 4
    assert request_cost(TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,)))([[0.0] * 4] * 3) == 3


def test_fixed_shape_batches_travel_as_one_array_and_free_ones_as_a_list():
    batch = packer(TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,)))([[1, 2, 3, 4]])
    assert isinstance(batch, np.ndarray) and batch.dtype == np.float32 and batch.shape == (1, 4)
    free = TorchPredictor(torch.nn.Identity(), item_shape=(None,))
    assert packer(free)([[1, 2], [3]]) == [[1, 2], [3]]


class _Broken(TorchPredictor):
    def example_items(self, size: int) -> list:
        raise RuntimeError("no examples today")


def test_a_failed_warm_up_never_says_ready_and_raises_when_strict(caplog):
    state = state_of(_Broken(torch.nn.Linear(4, 3), item_shape=(4,)))
    warm_up(state)
    assert not state.ready.is_set() and "never reported ready" in caplog.text
    with pytest.raises(RuntimeError, match="no examples today"):
        warm_up(state, strict=True)
