"""Every number setting of ``torchwork serve`` has an upper bound, checked when the config is built: a value past
it is one line naming the flag, before the socket is bound or any model loads (no pydantic SchemaError, no
model process built first)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import torchwork.serve.cli as serve_cli
from torchwork.cli import main
from torchwork.errors import ConfigError
from torchwork.serve.config import ServeConfig
from torchwork.serve.repository import ModelSpec
from torchwork.serve.served_models import ServedModels
from torchwork.serve.server import model_limits
from torchwork.threads import usable_cpus

HUGE = "99999999999999999999999"


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused setting must stop ``torchwork serve`` before its socket is bound or a model loads."""
    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torchwork serve went on past a setting it should have refused")

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    monkeypatch.setattr(serve_cli, "bind", must_not_run)
    monkeypatch.setattr(serve_cli, "load_predictor", must_not_run)


@pytest.mark.parametrize("flag, value", [
    ("--max-items", HUGE), ("--max-items", str(2**20 + 1)),
    ("--max-batch-size", HUGE), ("--max-batch-size", str(2**16 + 1)),
    ("--max-queue", str(2**24 + 1)), ("--max-text-length", str(2**24 + 1)),
    ("--max-body-bytes", str(2**30 + 1)), ("--max-connections", str(2**20 + 1)),
    ("--timeout-s", "1e9"), ("--head-timeout-s", "86401"), ("--body-timeout-s", "inf"),
    ("--idle-timeout-s", "nan"), ("--max-wait-ms", "60001"), ("--max-wait-ms", "nan"),
    ("--threads", "100000"), ("--model-nice", "20"), ("--model-nice", "-1"),
])
def test_a_number_past_its_bound_is_one_line_naming_the_flag(tmp_path, capsys, nothing_starts, flag: str,
                                                             value: str) -> None:
    assert main(["serve", str(tmp_path / "artifact"), "--port", "0", flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchwork: error: "), err
    assert flag in err[0], err[0]


def test_the_bounds_themselves_are_accepted() -> None:
    from torchwork.serve.schemas import Limits, request_model

    config = ServeConfig(max_items=2**20, max_batch_size=2**16, max_queue=2**24, max_text_length=2**24,
                         max_body_bytes=2**30, max_connections=2**20, timeout_s=86_400, head_timeout_s=86_400,
                         body_timeout_s=86_400, idle_timeout_s=86_400, max_wait_ms=60_000,
                         threads=4 * usable_cpus())
    request_model("text", (), "str", Limits(max_items=config.max_items, max_text_length=config.max_text_length))


@pytest.mark.parametrize("fields, words", [
    ({"max_items": 10**23}, "--max-items"), ({"max_batch_size": 2.0}, "must be a whole number"),
    ({"threads": 0}, "--threads"), ({"max_body_bytes": 10**5000}, "integer of 5001 digits"),
    ({"timeout_s": "30"}, "must be a number"),
])
def test_the_python_api_gets_the_same_checks(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        ServeConfig(**fields)


def test_a_model_limit_past_its_bound_is_refused() -> None:
    with pytest.raises(ConfigError, match="--max-items"):
        model_limits([f"a:max-items={HUGE}"], ["a"], ServeConfig())
    with pytest.raises(ConfigError, match="--max-batch-size"):
        model_limits([f"a:max-batch-size={2**16 + 1}"], ["a"], ServeConfig())


class _Predictor:
    kind, item_shape, dtype, labels = "tensor", (2,), "float32", None

    def predict_batch(self, items: Sequence[Any]) -> Sequence[Any]:  # pragma: no cover - never called
        return list(items)


def test_a_config_changed_past_a_bound_after_it_was_built_is_refused_by_the_served_models() -> None:
    config = ServeConfig()
    config.max_items = 10**23  # a dataclass: its fields can be set after __post_init__ checked them
    with pytest.raises(ConfigError, match="--max-items"):
        ServedModels([ModelSpec("a", "1", _Predictor())], config)
