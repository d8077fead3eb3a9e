"""unseeded (info): random numbers drawn before any seed was set.

Since PyTorch draws a new default seed for every process, an unseeded run cannot be repeated. A seed
counts as set when ``torch.manual_seed`` is called during the session, or when the seed in force at the
start is one a person chose: PyTorch's own default seed is a random 64-bit number, chosen seeds (0, 42,
1234, a date) fit in 32 bits. ``torchwork doctor`` starts each script from a fresh random seed, as a new
process would.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check


class Unseeded(Check):
    id = "unseeded"
    severity = "info"

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.seeded = False

    def install(self) -> None:
        self.seeded = self.session.initial_seed < 2**32
        check = self

        def make(original: Any) -> Any:
            def manual_seed(seed: Any) -> Any:
                check.seeded = True
                return original(seed)
            return manual_seed

        # torch.manual_seed is torch.random.manual_seed re-exported: both names are looked up at call time.
        self.session.patch(torch, "manual_seed", make)
        self.session.patch(torch.random, "manual_seed", make)

    def on_random(self, func: Any, args: tuple, kwargs: dict) -> None:
        if kwargs.get("generator") is not None:
            return  # an explicit generator is the user's own business
        self.session.stop_random(self.on_random)  # only the first draw matters
        if self.seeded or torch.initial_seed() != self.session.initial_seed:
            return  # seeded before the first draw
        name = getattr(func, "__name__", "a random operation")
        self.report(
            f"Random numbers were drawn (`{name}`, e.g. weight initialisation, dropout or shuffling) before any "
            "seed was set: each run starts from a different random state, so results cannot be reproduced.",
            "Seed once at the very top: torch.manual_seed(seed) (and random.seed / numpy.random.seed if you "
            "use them; pass a seeded torch.Generator to DataLoaders).")
