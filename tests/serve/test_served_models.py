"""serve/served_models.py: the slots of a server's models, their own settings, and finding one by name."""

from __future__ import annotations

import pytest
import torch

from torchwork.errors import ConfigError
from torchwork.serve import ServeConfig, TorchPredictor
from torchwork.serve.inference_protocol import ProtocolError
from torchwork.serve.repository import ModelSpec
from torchwork.serve.served_models import ServedModels


@pytest.fixture(scope="module")
def tiny() -> TorchPredictor:
    return TorchPredictor(torch.nn.Linear(2, 2), item_shape=(2,))


def test_each_model_has_its_own_settings_over_the_servers(tiny):
    models = ServedModels([ModelSpec("a", "1", tiny, limits={"max_batch_size": 4}), ModelSpec("b", "2", tiny)],
                          ServeConfig(max_batch_size=16))
    assert models.find("a", None).config.max_batch_size == 4
    assert models.find("b", "2").config.max_batch_size == 16
    assert models.slots["a"].metrics is models.find("a", "1").metrics


def test_find_refuses_an_unknown_model_or_version_with_404(tiny):
    models = ServedModels([ModelSpec("a", "1", tiny)], ServeConfig())
    with pytest.raises(ProtocolError, match=r"no model 'x' here; this server serves \['a'\]") as unknown:
        models.find("x", None)
    with pytest.raises(ProtocolError, match="has no version '2' loaded") as old:
        models.find("a", "2")
    assert unknown.value.status == old.value.status == 404


def test_listing_shows_a_version_being_loaded(tiny):
    models = ServedModels([ModelSpec("a", "1", tiny)], ServeConfig())
    models.slots["a"].loading = "2"
    assert models.listing() == [("a", "1", "LOADING"), ("a", "2", "LOADING")]
    assert not models.all_ready()


def test_a_request_finds_its_slot_by_the_name_in_its_path(tiny):
    one = ServedModels([ModelSpec("a", "1", tiny)], ServeConfig())
    assert one.slot_for({}) is one.single is one.slots["a"]
    two = ServedModels([ModelSpec("a", "1", tiny), ModelSpec("b", "1", tiny)], ServeConfig())
    assert two.single is None and two.slot_for({}) is None
    assert two.slot_for({"name": "b"}) is two.slots["b"] and two.slot_for({"name": "c"}) is None


@pytest.mark.parametrize(("specs", "message"), [
    (lambda p: [ModelSpec("a", "1", p), ModelSpec("a", "2", p)], "each model needs its own name"),
    (lambda p: [ModelSpec("a", "1", p, limits={"port": 1})], r"\['port'\] are not settings a model may have"),
    (lambda p: [ModelSpec("a/b", "1", p)], "model name 'a/b'"),
    (lambda p: [ModelSpec("a", "1", object())], "is not a predictor"),
])
def test_a_spec_that_cannot_be_served_is_refused_with_the_reason(tiny, specs, message):
    with pytest.raises(ConfigError, match=message):
        ServedModels(specs(tiny), ServeConfig())
