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


def _doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print {findings, exit} as JSON on stdout (the script's own stdout goes to stderr)")
    parser.add_argument("--check", action="append", metavar="ID",
                        help="run only this check (repeatable); default: every check")
    parser.add_argument("script", help="the Python script to run, unmodified")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")


def _explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default="-",
                        help="file holding a traceback or error message ('-' or nothing: standard input)")
    parser.add_argument("--json", action="store_true", help="print the explanations as JSON")


COMMANDS: list[Command] = [
    ("demo", "train a small classifier on scikit-learn's digits with the engine and print a summary",
     _demo_arguments, "torchwork.recipes.digits:cli_main"),
    ("doctor", "run a training script unmodified and report the classic PyTorch mistakes with file:line",
     _doctor_arguments, "torchwork.doctor.runner:cli_main"),
    ("explain", "explain a pasted PyTorch traceback or error message: cause and fix",
     _explain_arguments, "torchwork.doctor.explain:cli_main"),
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
