"""``torchwork runs ls|show|diff``: the run folders read back (see :mod:`torchwork.runs.listing`,
:mod:`torchwork.runs.show` and :mod:`torchwork.runs.compare`); ``torchwork resume RUN_FOLDER``: a run
continued (see :mod:`torchwork.runs.relaunch`). Prints; returns the exit code."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(parser: Any) -> None:
    actions = parser.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    ls = actions.add_parser("ls", help="one row per run folder: started, recipe, state, best and final of the "
                                       "monitored metric, seed, commit, duration",
                            description="List every run folder under RUNS_DIR (nested runs and tuning trials "
                                        "included) from their manifests; no database, no server.")
    ls.add_argument("runs_dir", nargs="?", default="runs", metavar="RUNS_DIR", help="where the runs are (default: runs)")
    ls.add_argument("--sort", metavar="KEY", help="a column (run, started, recipe, state, seed, commit, duration; "
                                                  "--sort=-KEY reverses), best / final (best first), or a monitored metric")
    ls.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                    help="keep rows where KEY=VALUE: a column (state=finished, seed=0, commit=5089535, "
                         "state=resumed) or a config setting (lr=0.03, config.model=ngram); repeatable")
    ls.add_argument("--json", action="store_true", help="print the rows as JSON")
    show = actions.add_parser("show", help="one run: what defined it, how it went, what it recorded",
                              description="Print a run's settings, code, data fingerprints, environment, "
                                          "state and monitored metric.")
    show.add_argument("run", metavar="RUN", help="a run folder")
    show.add_argument("--json", action="store_true", help="print it as JSON")
    diff = actions.add_parser("diff", help="every difference between two runs, grouped, their curves side by "
                                           "side, and which difference most likely explains the change",
                              description="Compare two run folders: settings, code, data, environment, seed / "
                                          "threads / precision; the monitored metric's curves aligned by step and "
                                          "where they diverge; a ranked verdict.")
    diff.add_argument("run_a", metavar="RUN_A", help="a run folder (the reference)")
    diff.add_argument("run_b", metavar="RUN_B", help="a run folder of the same recipe")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    diff.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with the curves plotted")


def cli_main(args: argparse.Namespace) -> int:
    """Run one ``runs`` action; an error's text is :func:`~torchwork.runs.terminal.shown` (it names folders)."""
    from torchwork.errors import TorchworkError
    from torchwork.runs.terminal import shown

    try:
        return _action(args)
    except TorchworkError as error:
        raise type(error)(shown(str(error))) from None


def _action(args: argparse.Namespace) -> int:
    """Every string read from a run folder is printed masked (no secret), and escaped on a terminal."""
    from torchwork.masking import mask_values
    from torchwork.runs.terminal import shown_values

    command = args.runs_command
    if command == "ls":
        from torchwork.runs.listing import filter_rows, format_rows, list_runs, sort_rows

        listed = list_runs(args.runs_dir)
        rows = sort_rows(filter_rows(listed, args.filter), args.sort)
        if listed and not rows and not args.json:  # "no run folders here" was false: none matched the filter
            print(f"none of the {len(listed)} run folder(s) under {args.runs_dir} matches "
                  f"{' and '.join('--filter ' + f for f in args.filter)}")
        else:
            print(json.dumps(mask_values([r.to_dict() for r in rows]), indent=1) if args.json else format_rows(rows))
        return 0
    if command == "show":
        from torchwork.runs.show import describe_run, format_description

        description = mask_values(describe_run(args.run))
        print(json.dumps(description, indent=1, default=str) if args.json
              else format_description(shown_values(description)))
        return 0
    from torchwork.runs.compare import compare_runs, format_comparison

    comparison = mask_values(compare_runs(args.run_a, args.run_b))
    if args.html:
        from torchwork.runs.diff_html import write_html

        write_html(args.html, comparison)
        print(f"wrote {args.html}", file=sys.stderr)
    print(json.dumps(comparison, indent=1, default=str) if args.json
          else format_comparison(shown_values(comparison)))
    return 0


def cli_resume(args: argparse.Namespace) -> int:
    """``torchwork resume RUN_FOLDER [--yes]``: the run's recorded command, planned and checked by
    :func:`~torchwork.runs.relaunch.resume_plan`, printed, confirmed when it is a script, then started in
    place of this process (POSIX) with ``TORCHWORK_RESUME`` set; a child's exit code elsewhere."""
    import os
    import subprocess

    from torchwork.errors import CheckpointError
    from torchwork.runs.lineage import outermost_of
    from torchwork.runs.relaunch import refuse_if_running, resume_plan

    run, plan, checkpoint = resume_plan(args.run_folder)
    refuse_if_running(run)
    first = outermost_of(run)  # a later training's run: the script starts again from its first training's
    print(f"torchwork: resuming {run} from {checkpoint.name}: {plan.shown()} (in {plan.cwd})", file=sys.stderr)
    if first != run:
        refuse_if_running(first)
        print(f"torchwork: {run.name} is a later training of its script: the script's first training continues "
              f"its own run, {first}, and each later one its own.", file=sys.stderr)
    if plan.note:
        print(f"torchwork: {plan.note}", file=sys.stderr)
    if plan.kind == "script":
        print(f"torchwork: this runs the Python script {plan.script or plan.argv[1]}, named by the run folder's "
              "manifest.json: run it only if you trust that script.", file=sys.stderr)
    if plan.reaches:
        print(f"torchwork: this command connects to {plan.reaches}, named by the run folder's manifest.json: run "
              "it only if you trust that machine.", file=sys.stderr)
    if plan.kind == "script" or plan.reaches:
        if not _confirmed(getattr(args, "yes", False)):
            raise CheckpointError("not confirmed: nothing was run. Check the command above and pass --yes to "
                                  "run it.")
    env = dict(os.environ, TORCHWORK_RESUME=str(first))
    try:
        if os.name != "posix":
            return subprocess.run(plan.argv, cwd=plan.cwd, env=env).returncode
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir(plan.cwd)
        os.execve(plan.argv[0], plan.argv, env)  # returns only by raising
    except OSError as error:  # the interpreter gone, a working directory removed meanwhile
        raise CheckpointError(f"could not start {plan.argv[0]} in {plan.cwd}: {error}.") from None


def _confirmed(yes: bool) -> bool:
    """Run the script? ``--yes``, or ``y`` at the prompt on a terminal; never without one of them."""
    if yes:
        return True
    if sys.stdin.isatty():
        return input("Run it? [y/N] ").strip().lower() in ("y", "yes")
    return False
