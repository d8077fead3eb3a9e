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

    splits = load_dataset(args.dataset, seed=args.seed)
    if args.data_command == "describe":
        print(splits.describe())
        return 0
    counts = None
    if args.workers:
        try:
            counts = [int(w) for w in args.workers.split(",") if w.strip()]
        except ValueError:
            raise ConfigError(f"--workers {args.workers!r} must be comma-separated integers, e.g. 0,1,2.") from None
    options = loader_options(splits)
    step = small_model_step(splits, options.get("preprocessor")) if args.model == "small" else None
    report = profile_loader(splits.train, args.batch_size, num_workers=counts, batches=args.batches,
                            warmup=args.warmup, step=step, seed=args.seed, device="cpu", **options)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report)
    return 0
