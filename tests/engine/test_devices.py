"""engine/devices.py: batches of any nesting reach the device, and device names and strays are checked."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest
import torch
from torch import nn

from torchwork import move_to_device, resolve_device
from torchwork.errors import DeviceError

Pair = namedtuple("Pair", "a b")


@dataclasses.dataclass
class Example:
    tokens: torch.Tensor
    extra: dict
    name: str = "x"


def test_move_to_device_reaches_every_nested_tensor():
    meta = torch.device("meta")
    batch = {"x": torch.zeros(2), "pair": Pair(torch.ones(1), [torch.ones(1), "text"]),
             "ex": Example(torch.zeros(3), {"m": torch.ones(2)})}
    moved = move_to_device(batch, meta)
    assert moved["x"].device == meta
    assert isinstance(moved["pair"], Pair) and moved["pair"].a.device == meta
    assert moved["pair"].b[0].device == meta and moved["pair"].b[1] == "text"
    assert isinstance(moved["ex"], Example) and moved["ex"].tokens.device == meta
    assert moved["ex"].extra["m"].device == meta and moved["ex"].name == "x"


def test_resolve_device_auto_and_errors():
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA"):
            resolve_device("cuda")
    with pytest.raises(DeviceError, match="not a device"):
        resolve_device("gpu0")


def test_stray_plain_tensor_attribute_is_named():
    class Stray(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(8, 2, device="meta")

        def forward(self, x):
            return self.linear(x)

    with pytest.raises(DeviceError, match="linear.weight"):
        from torchwork.engine.devices import check_model_on
        check_model_on(Stray(), torch.device("cpu"))
