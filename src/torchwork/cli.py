"""Command-line entry point: argument parsing only. Each subcommand calls one module, imported lazily.

Nothing here imports torch, so ``torchwork --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from torchwork import __version__

# Each command: (name, help, add_arguments, "module:function"). The function receives the parsed
# namespace and returns an exit code.
Command = tuple[str, str, Callable[[argparse.ArgumentParser], None], str]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=8, help="training epochs (default: 8)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def _resume_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_folder", help="a run folder: RUN_DIR/<timestamp>-<id>")


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from torchwork.serve.server import add_arguments  # no torch or fastapi import: --help stays fast

    add_arguments(parser)


COMMANDS: list[Command] = [
    ("demo", "train a small classifier on scikit-learn's digits with the engine and print a summary",
     _demo_arguments, "torchwork.recipes.digits:cli_main"),
    ("resume", "continue a run from its newest valid checkpoint, by re-running its recorded command",
     _resume_arguments, "torchwork.runs.relaunch:main"),
    ("serve", "serve a model over HTTP (FastAPI + uvicorn) with dynamic batching, health and metrics",
     _serve_arguments, "torchwork.serve.server:cli_main"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchwork",
        description="PyTorch engineering practice as software: train, resume, export, serve, diagnose.",
    )
    parser.add_argument("--version", action="version", version=f"torchwork {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text, add_arguments, target in COMMANDS:
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(command_parser)
        command_parser.set_defaults(_target=target)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_target", None):
        parser.print_help()
        return 0
    module_name, function_name = args._target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    from torchwork.errors import TorchworkError

    try:
        return int(function(args) or 0)
    except TorchworkError as error:
        print(f"torchwork: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
