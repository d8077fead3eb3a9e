"""Moved to :mod:`torchwork.seeding` (data and the engine seed too, and neither imports runs); kept so that
``torchwork.runs.seeding`` imports keep working."""

from torchwork.seeding import current_seed, seed_everything, seed_worker

__all__ = ["current_seed", "seed_everything", "seed_worker"]
