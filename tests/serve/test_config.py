"""serve/config.py: every server setting is checked when the config is built."""

from __future__ import annotations

import pytest

from torchwork.errors import ConfigError
from torchwork.serve import ServeConfig


def test_serve_config_is_checked():
    with pytest.raises(ConfigError, match="max_batch_size=0 must be positive"):
        ServeConfig(max_batch_size=0)
    with pytest.raises(ConfigError, match="max_wait_ms"):
        ServeConfig(max_wait_ms=-1)
    for name in ("head_timeout_s", "body_timeout_s", "idle_timeout_s", "max_connections"):
        for value in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ConfigError, match=f"{name}=.* must be positive and finite"):
                ServeConfig(**{name: value})
