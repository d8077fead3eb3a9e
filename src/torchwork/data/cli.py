"""``torchwork data describe|profile DATASET``: a bundled dataset's splits, or where its input pipeline's time
goes (:func:`torchwork.data.profile.profile_loader`). ``data check`` reads a user's file with the recipes'
loaders: :func:`torchwork.recipes.cli.cli_data`, which sends these two actions here.

Example:
    >>> import argparse
    >>> cli_main(argparse.Namespace(data_command="profile", dataset="digits", seed=0, workers="0,two"))
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --workers '0,two' must be comma-separated integers, e.g. 0,1,2.
"""

from __future__ import annotations

import argparse
import json

from torchwork.errors import ConfigError


def cli_main(args: argparse.Namespace) -> int:
    """Print the splits (``describe``) or the profile (``profile``; ``--json``: as JSON); 0."""
    from torchwork.data.datasets import load_dataset
    from torchwork.data.profile import loader_options, profile_loader, small_model_step
    from torchwork.seeding import check_seed

    check_seed(args.seed, "--seed")  # every argument before the dataset is read
    counts = _worker_counts(args) if args.data_command == "profile" else None
    splits = load_dataset(args.dataset, seed=args.seed)
    if args.data_command == "describe":
        print(splits.describe())
        return 0
    options = loader_options(splits)
    step = small_model_step(splits, options.get("preprocessor")) if args.model == "small" else None
    report = profile_loader(splits.train, args.batch_size, num_workers=counts, batches=args.batches,
                            warmup=args.warmup, step=step, seed=args.seed, device="cpu", **options)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report)
    return 0


def _worker_counts(args: argparse.Namespace) -> list[int] | None:
    """``profile``'s ``--workers`` as counts (None: the default list), checked with ``--batch-size``,
    ``--batches`` and ``--warmup`` before anything is loaded."""
    from torchwork.data.loaders import MAX_BATCH_SIZE, most_workers
    from torchwork.data.profile import MAX_BATCHES

    counts = None
    if args.workers:
        try:
            counts = [int(w) for w in args.workers.split(",") if w.strip()]
        except ValueError:
            raise ConfigError(f"--workers {args.workers!r} must be comma-separated integers, e.g. 0,1,2.") from None
    problems = []
    if counts is not None and not all(0 <= n <= most_workers() for n in counts):
        problems.append(f"--workers {args.workers}: each count must be in [0, {most_workers()}] (4 worker "
                        "processes per usable CPU, 8 at least)")
    batch_size = getattr(args, "batch_size", 64)
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        problems.append(f"--batch-size {batch_size}: use 1 to {MAX_BATCH_SIZE} (2**20)")
    for flag, value, low in (("--batches", getattr(args, "batches", 1), 1), ("--warmup", getattr(args, "warmup", 0), 0)):
        if not low <= value <= MAX_BATCHES:
            problems.append(f"{flag} {value}: use {low} to {MAX_BATCHES}")
    if problems:
        raise ConfigError("; ".join(problems) + ".")
    return counts
