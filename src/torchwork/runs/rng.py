"""Capture and restore every RNG stream, in a form ``torch.load(weights_only=True)`` accepts.

Example:
    >>> import torch
    >>> from torchwork.runs.rng import capture_rng, restore_rng
    >>> state = capture_rng(); a = torch.rand(2)
    >>> restore_rng(state); torch.equal(a, torch.rand(2))
    True
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng() -> dict[str, Any]:
    """Python, NumPy, torch CPU and each CUDA device's generator state."""
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {"bit_generator": numpy_state["bit_generator"],
                  "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                  "pos": int(numpy_state["state"]["pos"]),
                  "has_gauss": int(numpy_state["has_gauss"]), "gauss": float(numpy_state["gauss"])},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def restore_rng(state: dict[str, Any]) -> None:
    """Put every generator back to ``state`` (from :func:`capture_rng`)."""
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    numpy = state["numpy"]
    np.random.set_state({"bit_generator": numpy["bit_generator"],
                         "state": {"key": numpy["key"].numpy().astype(np.uint32), "pos": numpy["pos"]},
                         "has_gauss": numpy["has_gauss"], "gauss": numpy["gauss"]})
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        if len(cuda) != torch.cuda.device_count():
            import warnings
            warnings.warn(f"the checkpoint holds RNG states for {len(cuda)} CUDA devices, this machine has "
                          f"{torch.cuda.device_count()}: restoring the ones that exist.", stacklevel=2)
        for index, device_state in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(device_state, index)
