"""What torchrun told this process: rank, world size, local rank. Cheap: no torch import.

Example:
    >>> from torchwork.distributed.env import world_from_env
    >>> world_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}).is_rank_zero
    False
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_rank_zero(self) -> bool:
        return self.rank == 0


def world_from_env(environ: Mapping[str, str] | None = None) -> World:
    """Read RANK / WORLD_SIZE / LOCAL_RANK as torchrun sets them (a single process when absent)."""
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" not in environ:
        return World()
    try:
        return World(int(environ.get("RANK", "0")), int(environ["WORLD_SIZE"]), int(environ.get("LOCAL_RANK", "0")))
    except ValueError as error:
        from torchwork.errors import ConfigError
        raise ConfigError(f"torchrun environment is malformed ({error}): RANK, WORLD_SIZE and LOCAL_RANK "
                          "must be integers. Launch with `torchrun` or `torchwork launch`.") from None
