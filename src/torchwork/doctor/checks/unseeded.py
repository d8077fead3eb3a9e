"""unseeded (info): random numbers drawn before any seed was set.

Since PyTorch draws a new default seed for every process, an unseeded run cannot be repeated.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check


class Unseeded(Check):
    id = "unseeded"
    severity = "info"

    def on_random(self, func: Any, args: tuple, kwargs: dict) -> None:
        if kwargs.get("generator") is not None:
            return  # an explicit generator is the user's own business
        self.session.stop_random(self.on_random)  # only the first draw matters
        if torch.initial_seed() != self.session.initial_seed:
            return  # seeded before the first draw
        name = getattr(func, "__name__", "a random operation")
        self.report(
            f"Random numbers were drawn (`{name}`, e.g. weight initialisation, dropout or shuffling) before any "
            "seed was set: each run starts from a different random state, so results cannot be reproduced.",
            "Seed once at the very top: torch.manual_seed(seed) (and random.seed / numpy.random.seed if you "
            "use them; pass a seeded torch.Generator to DataLoaders).")
