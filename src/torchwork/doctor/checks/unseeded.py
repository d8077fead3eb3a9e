"""unseeded (info): random numbers drawn before any seed, in a script whose runs are resumed or compared.

Since PyTorch draws a new default seed for every process, an unseeded run cannot be repeated. That matters
only where runs meet each other: the handbook keeps deterministic settings for strict comparisons, and a
tutorial that trains once and prints its accuracy loses nothing without a seed. So the note is made only
when the script shows that its runs are resumed or compared:

* it saves a training checkpoint (``torch.save`` of a dict holding an optimizer's ``state_dict()``) or
  loads one into an optimizer (``optimizer.load_state_dict``): a resumed run;
* it trains two or more models of the same class one after the other (a sweep): runs compared. Models
  trained in turn inside one loop (a GAN's generator and discriminator, both ``nn.Sequential``) are one run,
  not a comparison: their optimizers' steps interleave.

A seed counts as set when ``torch.manual_seed`` is called during the session, or when the seed in force
at the start is one a person chose: PyTorch's own default seed is a random 64-bit number, chosen seeds (0,
42, 1234, a date) fit in 32 bits. ``torchwork doctor`` starts each script from a fresh random seed, as a
new process would. The note is made at the first draw.
"""

from __future__ import annotations

from typing import Any

import torch

from torchwork.doctor.checks import Check
from torchwork.doctor.checks._forwards import optimizer_holds
from torchwork.doctor.findings import format_where


def holds_optimizer_state(obj: Any) -> bool:
    """Whether ``obj`` is a checkpoint dict with an optimizer's state_dict among its values."""
    return isinstance(obj, dict) and any(
        isinstance(value, dict) and "param_groups" in value and "state" in value for value in obj.values())


class Unseeded(Check, id="unseeded", severity="info"):
    def setup(self) -> None:
        self.seeded = False
        self.first_draw: tuple[str, tuple[str, int] | None] | None = None  # (operation, line)
        self.signal: str | None = None
        # optimizer id -> [model id, model class, the session's step count at its first and at its last step]
        self.trained: dict[int, list[Any]] = {}

    def install(self) -> None:
        self.seeded = self.session.initial_seed < 2**32
        check = self

        def make(original: Any) -> Any:
            def manual_seed(seed: Any) -> Any:
                check.seeded = True
                return original(seed)
            return manual_seed

        def save(original: Any) -> Any:
            def saver(obj: Any, *args: Any, **kwargs: Any) -> Any:
                if check.signal is None and holds_optimizer_state(obj):
                    check.signal = f"saves a checkpoint to resume from at {format_where(check.session.where())}"
                return original(obj, *args, **kwargs)
            return saver

        def load(original: Any) -> Any:
            def load_state_dict(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
                if check.signal is None:
                    check.signal = f"resumes an optimizer's state at {format_where(check.session.where())}"
                return original(optimizer, *args, **kwargs)
            return load_state_dict

        # torch.manual_seed is torch.random.manual_seed re-exported: both names are looked up at call time.
        self.session.patch(torch, "manual_seed", make)
        self.session.patch(torch.random, "manual_seed", make)
        self.session.patch(torch, "save", save)
        self.session.patch(torch.optim.Optimizer, "load_state_dict", load)

    def on_random(self, func: Any, args: tuple, kwargs: dict) -> None:
        if kwargs.get("generator") is not None:
            return  # an explicit generator is the user's own business
        self.session.stop_random(self.on_random)  # only the first draw matters
        if self.seeded or torch.initial_seed() != self.session.initial_seed:
            return  # seeded before the first draw
        self.first_draw = (getattr(func, "__name__", "a random operation"), self.session.where())

    def on_step_post(self, optimizer: Any) -> None:
        if self.first_draw is None:
            return
        steps = self.session.optimizer_steps
        known = self.trained.get(id(optimizer))
        if known is not None:
            known[3] = steps
            return
        if len(self.trained) > 64:
            return
        model = next((m for m in self.session.models_seen() if optimizer_holds(optimizer, m)), None)
        if model is not None:
            self.trained[id(optimizer)] = [id(model), type(model).__name__, steps, steps]

    def _compared(self) -> str | None:
        """'trains 3 Net models to compare' when models of one class were trained one after the other."""
        spans: dict[str, dict[int, tuple[int, int]]] = {}
        for model_id, label, first, last in self.trained.values():
            known = spans.setdefault(label, {}).get(model_id, (first, last))
            spans[label][model_id] = (min(first, known[0]), max(last, known[1]))
        for label, models in spans.items():
            ordered = sorted(models.values())
            in_turn = all(later[0] > earlier[1] for earlier, later in zip(ordered, ordered[1:]))
            if len(ordered) >= 2 and in_turn:
                return f"trains {len(ordered)} {label} models to compare"
        return None

    def finish(self) -> None:
        signal = self.signal or self._compared()
        if self.first_draw is None or signal is None:
            return
        name, where = self.first_draw
        self.report(
            f"Random numbers were drawn (`{name}`, e.g. weight initialisation, dropout or shuffling) before any "
            f"seed was set, and the script {signal}: each run starts from a different random state, so "
            "resumed or compared runs differ by chance as well as by what changed.",
            "Seed once at the very top: torch.manual_seed(seed) (and random.seed / numpy.random.seed if you "
            "use them; pass a seeded torch.Generator to DataLoaders).", where=where)
