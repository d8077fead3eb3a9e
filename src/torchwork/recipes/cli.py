"""The recipes' command lines: ``torchwork digits``, ``quickstart``, ``train``, ``fit`` (a file or an image
folder, ``--time-budget`` included) and ``data`` (``check`` here; ``describe`` and ``profile`` in
:mod:`torchwork.data.cli`). Each turns the parsed arguments into a call of the work function a Python user
calls too (:func:`~torchwork.recipes.registry.run_recipe`, :func:`torchwork.recipes.fit_images.run`, ...),
prints, and returns the exit code.

Example (``torchwork data check`` of a small file):
    >>> import argparse, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "notes.csv"
    >>> _ = path.write_text("note,mood\\n" + "".join(f"day {i} was fine,up\\nday {i} was bad,down\\n" for i in range(9)))
    >>> args = argparse.Namespace(data_command="check", data=str(path), text=None, label=None, test=None, seed=0,
    ...                           json=False)
    >>> cli_data(args, label_noise=False, say=lambda line: None)
    0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torchwork.errors import ConfigError

if TYPE_CHECKING:
    from torchwork.data.findings import DataReport
    from torchwork.recipes.fit_images import ImageFitConfig


def cli_digits(args: argparse.Namespace) -> int:
    """``torchwork digits [--epochs N] [--seed S]``."""
    from torchwork.recipes.digits import run

    run(epochs=args.epochs, seed=args.seed)
    return 0


@contextlib.contextmanager
def _stopped_cleanly() -> Iterator[None]:
    """A SIGTERM (``timeout``, a CI cancel, ``docker stop``) ends the run as Ctrl-C does: the export's temporary
    folder is removed on the way out (the default ended the process at once and left it in the run folder)."""
    from torchwork.termination import TERMINATED, sigterm_as_exit

    with sigterm_as_exit():
        try:
            yield
        except SystemExit as stop:
            if stop.code == TERMINATED:
                print("torchwork: terminated (SIGTERM); nothing half-written was left. `torchwork resume RUN` goes "
                      "on from the run's last checkpoint.", file=sys.stderr)
            raise


def cli_quickstart(args: argparse.Namespace) -> int:
    """``torchwork quickstart [--recipe NAME] [--serve] [--quick] [--set key=value ...]``."""
    from torchwork.recipes.registry import quickstart_config, run_recipe

    name, config = quickstart_config(args.recipe, args.set or [], args.quick)
    with _stopped_cleanly():
        run_recipe(name, config, serve=args.serve)
    return 0


def cli_train(args: argparse.Namespace) -> int:
    """``torchwork train RECIPE_OR_CONFIG.yaml [--set key=value ...] [--nproc N ...]``."""
    from torchwork.distributed.launch import check_launch
    from torchwork.recipes.registry import resolve, run_recipe

    # validate before launching anything: --nproc 0 (the default) trains in this process, as 1 does
    check_launch(args.nproc or 1, args.nnodes, args.node_rank, args.master_port)
    name, config = resolve(args.recipe_or_config, args.set)
    if args.nproc > 1 or args.nnodes > 1:
        import subprocess

        from torchwork.distributed.launch import torchrun_command

        script_args = ["train", args.recipe_or_config, *sum((["--set", s] for s in args.set or []), [])]
        command = torchrun_command("-m", ["torchwork.cli", *script_args], args.nproc, args.nnodes,
                                   args.node_rank, args.master_addr, args.master_port)
        return subprocess.run(command).returncode
    with _stopped_cleanly():
        run_recipe(name, config)
    return 0


def fit_settings(args: argparse.Namespace) -> list[str]:
    """The sentiment recipe's settings ``torchwork fit`` runs: the user's file and columns, the fine-tuned
    transformer (the n-gram model with ``--quick``), a run folder of its own, then the user's ``--set``s; a
    ``--set`` of a setting fit takes from its own arguments (:data:`FIT_OWNS`: ``data=``, ``model=``, ...) is
    refused, naming the argument to use (``run_dir=`` is the user's to set).

    Example:
        >>> fit_settings(argparse.Namespace(data="a.csv", text=None, label="stars", test=None, quick=True,
        ...                                 set=["seed=1"]))
        ['run_dir=runs/fit', 'data=a.csv', 'model=ngram', 'transformer_max_length=0', 'label=stars', 'seed=1']
        >>> fit_settings(argparse.Namespace(data="a.csv", set=["data=b.csv"]))
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --set data=...: fit sets data from its own arguments; give the file as fit's first argument: torchwork fit FILE.
    """
    refuse_owned_settings(args.set or [], FIT_OWNS)
    settings = ["run_dir=runs/fit", f"data={args.data}", "model=ngram" if args.quick else "model=transformer",
                "transformer_max_length=0"]  # chosen from the data's token lengths
    settings += [f"{key}={value}" for key, value in (("text", args.text), ("label", args.label),
                                                      ("test_data", args.test),
                                                      ("model_dir", getattr(args, "model", None))) if value]
    return [*settings, *(args.set or [])]


# The settings fit takes from its own arguments (a --set of one would silently win over them): what to use.
FIT_OWNS = {"data": "give the file as fit's first argument: torchwork fit FILE",
            "text": "use --text COLUMN", "label": "use --label COLUMN", "test_data": "use --test FILE",
            "model_dir": "use --model DIR (a local encoder folder)",
            "model": "add --quick for the n-gram model, leave it out for the fine-tuned transformer"}


def refuse_owned_settings(assignments: list[str], owned: dict[str, str]) -> None:
    """A ConfigError for the first of ``assignments`` (``--set key=value``s) that sets one of ``owned``, the
    settings a command takes from its own arguments, naming what to use instead."""
    from torchwork.recipes.config import parse_assignments

    for key in parse_assignments(assignments):
        if key in owned:
            raise ConfigError(f"--set {key}=...: fit sets {key} from its own arguments; {owned[key]}.")


def cli_fit(args: argparse.Namespace) -> int:
    """``torchwork fit DATA [--text COL] [--label COL] [--test DATA] [--quick] [--serve] [--set k=v] [--json]
    [--time-budget 15m]``: the budget read before any work (a bad one refused at once), then an image folder
    to :func:`torchwork.recipes.fit_images.run`, a file to the sentiment recipe.

    Example:
        >>> cli_fit(argparse.Namespace(time_budget="0", quick=True))
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --time-budget '0': give a positive duration of at most a week, in seconds (900 or 900s), minutes (15m), hours (1.5h) or both (1h30m).
    """
    budget = _budget_plan(args)
    if os.path.isdir(args.data):  # an image folder
        return _fit_images(args)
    from torchwork.recipes.registry import resolve, run_recipe

    name, config = resolve("sentiment", fit_settings(args))
    with _stopped_cleanly():
        summary = run_recipe(name, config, serve=args.serve, budget=budget)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0


def _budget_plan(args: argparse.Namespace) -> Any:
    """The plan of ``--time-budget`` (None without one); its trials are a study of the tune package, which a
    command line may reach (:mod:`torchwork.tune.budget`)."""
    text = getattr(args, "time_budget", None)
    if text is None:
        return None
    from torchwork.recipes.fit_budget import BudgetPlan, command_age, parse_budget

    budget = parse_budget(text)
    from torchwork.tune.budget import study_trials
    from torchwork.tune.budget_transformer import tuned_transformer

    # study_trials tunes the n-gram model (--quick); without --quick the recipe tunes the encoder instead
    return BudgetPlan(budget, trials=study_trials, spent_s=command_age(sys.argv), encoder_trials=tuned_transformer)


def image_fit_config(args: argparse.Namespace) -> ImageFitConfig:
    """The config of ``torchwork fit PHOTOS/ [--quick] [--set k=v ...]``; the text-table options refused.

    Example:
        >>> image_fit_config(argparse.Namespace(data="photos", quick=True, set=["seed=2"])).epochs
        1
    """
    from torchwork.recipes.config import apply_overrides, parse_assignments
    from torchwork.recipes.fit_images import QUICK, ImageFitConfig

    given = [f"--{name.replace('_', '-')}" for name in ("text", "label", "test", "model", "time_budget")
             if getattr(args, name, None)]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise ConfigError(f"{args.data} is an image folder: {', '.join(given)} {verb} to a text file only (the "
                          "classes are its sub-folders, the test split its test/ folder); drop "
                          f"{', '.join(given)}.")
    refuse_owned_settings(getattr(args, "set", None) or [], {"data": FIT_OWNS["data"]})
    values = parse_assignments([f"data={args.data}", *(QUICK if getattr(args, "quick", False) else []),
                                *(getattr(args, "set", None) or [])])
    return apply_overrides(ImageFitConfig(), values)


def _fit_images(args: argparse.Namespace) -> int:
    """``torchwork fit PHOTOS/ [--quick] [--serve] [--set key=value ...] [--json]``."""
    from torchwork.recipes.fit_images import run

    config = image_fit_config(args)
    with _stopped_cleanly():
        summary = run(config, serve=getattr(args, "serve", False))
    if getattr(args, "json", False):
        print(json.dumps(summary, indent=2, default=str))
    return 0


def cli_data(args: argparse.Namespace, *, label_noise: bool = True, say: Callable[[str], Any] = print) -> int:
    """``torchwork data check DATA`` (exit 1 when a finding is an error); ``describe`` and ``profile`` go to
    :mod:`torchwork.data.cli`."""
    if args.data_command != "check":
        from torchwork.data.cli import cli_main as dataset_main

        return dataset_main(args)
    import orjson

    from torchwork.recipes.fit_data import blocking_errors, load_fit_data
    from torchwork.seeding import check_seed

    check_seed(args.seed, "--seed")  # before any file is read
    quiet = args.json
    if os.path.isdir(args.data):
        report, config = _image_report(args, (lambda line: None) if quiet else say), None
    else:
        config = data_check_config(args)
        report = load_fit_data(args.data, text=args.text, label=args.label, test=args.test, seed=args.seed,
                               drop_leaked=config.drop_leaked, merge_label_variants=config.merge_label_variants,
                               max_length=config.transformer_max_length or None, label_noise=label_noise,
                               say=(lambda line: None) if quiet else say).report
    if quiet:
        say(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        for line in report.lines():
            say(line)
    drop_leaked = config is not None and config.drop_leaked
    if drop_leaked and not quiet and any(f.kind == "cross-split-duplicate" for f in report.errors):
        say("drop_leaked=true: fit leaves those rows out of the later split and goes on")
    return 1 if blocking_errors(report, drop_leaked) else 0


DATA_CHECK_SETTINGS = ("drop_leaked", "merge_label_variants", "transformer_max_length")


def data_check_config(args: argparse.Namespace) -> Any:
    """The sentiment recipe's settings ``data check`` reads (:data:`DATA_CHECK_SETTINGS`, given with ``--set``,
    validated as ``fit`` validates them): the report is the one ``fit`` would write and stop on. A setting
    that changes the training, not the report, is refused with the list.

    Example:
        >>> data_check_config(argparse.Namespace(set=["merge_label_variants=yes"])).merge_label_variants
        True
        >>> data_check_config(argparse.Namespace(set=["epochs=3"]))
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: --set epochs: data check reads only the settings that change the data report (drop_leaked, merge_label_variants, transformer_max_length); epochs is not one of them
    """
    from torchwork.recipes.config import apply_overrides, parse_assignments, suggest_setting
    from torchwork.recipes.sentiment import SentimentConfig

    values = parse_assignments(getattr(args, "set", None) or [])
    for key in values:
        if key not in DATA_CHECK_SETTINGS:
            close = suggest_setting(key, list(DATA_CHECK_SETTINGS))
            why = f"did you mean {close}?" if close else f"{key} is not one of them"
            raise ConfigError(f"--set {key}: data check reads only the settings that change the data report "
                              f"({', '.join(DATA_CHECK_SETTINGS)}); {why}")
    # as fit sets it (fit_settings): the transformer_max_length fit reads is chosen from the texts (0)
    return apply_overrides(SentimentConfig(transformer_max_length=0), values)


def _image_report(args: argparse.Namespace, say: Callable[[str], Any]) -> DataReport:
    """The data report of the image folder ``args.data``; --text, --label, --test and --set name a table's
    columns, a test file and the settings of a text file's report, and are refused."""
    from torchwork.data.image_audit import audit_images
    from torchwork.data.image_folder import read_image_folder

    given = [f"--{name}" for name in ("text", "label", "test", "set") if getattr(args, name, None)]
    if given:
        raise ConfigError(f"{args.data} is an image folder: {', '.join(given)} apply to a text table only. The "
                          "classes are the folder's sub-folders and the test split its test/ folder; drop "
                          f"{', '.join(given)}.")
    data = read_image_folder(args.data)
    say(f"image folder {data.folder}: {len(data.rows):,} image files in {len(data.classes)} classes "
        f"({data.layout})")
    return audit_images(data, seed=args.seed,
                        progress=lambda done, total: say(f"  read {done:,} of {total:,} images"))
