"""Reproducible runs: seeding, run folders, manifest, loggers, checkpoints and exact resume."""
