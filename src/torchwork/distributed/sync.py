"""Gradient sync for DDP: the window's mean is over every rank's samples, and gradients are all-reduced
once per optimizer step, after the window's last micro-batch (``no_sync`` on the others).

The engine's one-process version is :class:`torchwork.engine.step.LocalSync`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from torchwork.distributed.env import World


class DDPSync:
    """The :class:`~torchwork.engine.step.GradSync` of one DDP rank."""

    def __init__(self, ddp: torch.nn.parallel.DistributedDataParallel, world: World, device: torch.device) -> None:
        self.ddp, self.world, self.device = ddp, world, device

    def sample_scale(self, window_samples: int) -> float:
        # DDP averages gradients over ranks, hence world size / samples on all ranks
        from torchwork.distributed.setup import all_reduce_sum

        return self.world.world_size / all_reduce_sum([window_samples], self.device)[0]

    def micro_batch(self, final: bool) -> Any:
        return contextlib.nullcontext() if final else self.ddp.no_sync()
