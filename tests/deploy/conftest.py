"""The deploy tests run torch on one thread: the machine is shared and exports are CPU-bound."""

from __future__ import annotations

import pytest
from deploy_helpers import one_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_thread():
        yield
