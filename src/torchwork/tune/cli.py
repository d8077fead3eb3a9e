"""``torchwork tune``'s arguments and entry point (``tune RECIPE ...`` runs a study, ``tune show X`` reads one).

Nothing heavy is imported here: ``torchwork tune --help`` stays fast.
"""

from __future__ import annotations

import argparse

from torchwork.errors import ConfigError
from torchwork.tune.study import MAX_TRIALS, MIN_WORKERS_CAP, WORKERS_PER_CPU, check_study_size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="RECIPE_OR_YAML",
                        help="a recipe name (sentiment) or a YAML config naming its recipe; or 'show' to print "
                             "a study's trials")
    parser.add_argument("where", nargs="?", metavar="STUDY_FOLDER_OR_STORAGE_URL",
                        help="with 'show': the study folder (<run_dir>/tune/<study>) or its storage URL")
    parser.add_argument("--space", metavar="SPACE.yaml",
                        help="the settings to tune, one per line: 'lr: {low: 1.0e-4, high: 0.1, log: true}', "
                             "'epochs: {choices: [4, 8, 12]}', ints with 'step'")
    parser.add_argument("--trials", type=int, help=f"the study's total number of trials, at most {MAX_TRIALS:,} (a "
                                                   "rerun runs the missing ones)")
    parser.add_argument("--workers", type=int, default=1,
                        help=f"worker processes, at most {WORKERS_PER_CPU} per usable CPU ({MIN_WORKERS_CAP} where that "
                             "is fewer) (default: 1); each gets floor(cores / workers) threads")
    parser.add_argument("--storage", metavar="URL",
                        help="postgresql://USER:PASSWORD@HOST:PORT/DB to share the study between machines "
                             "(default: an SQLite file in the study folder)")
    parser.add_argument("--study", metavar="NAME", help="the study's name (default: RECIPE-SPACE)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds every trial and draws trial n's params from (seed, n) (default: 0)")
    parser.add_argument("--pruner", default="percentile", choices=["percentile", "median", "hyperband", "none"],
                        help="stop unpromising trials from their per-epoch validation score (default: percentile, "
                             "the bottom 40%% at an epoch)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", help="start no trial after this many seconds")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="a setting of the recipe, for every trial")
    parser.add_argument("--no-final", action="store_true",
                        help="skip the two runs after the trials (the defaults' validation score, and the best "
                             "settings rerun by the recipe for their test score)")


def cli_main(args: argparse.Namespace) -> int:
    if args.target == "show":
        from torchwork.tune.show import show

        if not args.where:
            raise ConfigError("torchwork tune show needs a study folder (<run_dir>/tune/<study>) or a storage URL.")
        print(show(args.where, args.study))
        return 0
    if args.where:
        from torchwork.masking import mask_secrets

        raise ConfigError(f"unexpected argument {mask_secrets(args.where)!r}; the study's settings go with --space, --trials, "
                          "--set.")
    if not args.space or args.trials is None:
        raise ConfigError("torchwork tune needs --space SPACE.yaml and --trials N, e.g. "
                          "torchwork tune sentiment --space space.yaml --trials 16.")
    check_study_size(args.trials, args.workers)  # before the storage is created and the trials queued
    return _run_study(args)


def _run_study(args: argparse.Namespace) -> int:
    """``torchwork tune RECIPE_OR_YAML --space SPACE.yaml --trials N ...``: the summary as one JSON line; 1 when
    no trial completed (what went wrong on stderr)."""
    import json
    import sys

    from torchwork.tune.runner import TuneOptions, tune, unfinished_message

    options = TuneOptions(target=args.target, space=args.space, trials=args.trials, workers=args.workers,
                          storage=args.storage, study=args.study, seed=args.seed, pruner=args.pruner,
                          timeout=args.timeout, settings=list(args.set or []), final=not args.no_final)
    summary = tune(options)
    print(json.dumps({k: summary[k] for k in ("study", "best_value", "best_params", "best_trial", "trials")}))
    failed = unfinished_message(summary, options)
    if failed:
        print(failed, file=sys.stderr)
        return 1
    return 0
