"""Command-line entry point: argument parsing only. Each subcommand calls one module, imported lazily.

Nothing here imports torch, so ``torchwork --help`` stays fast.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
import typing
from collections.abc import Callable, Sequence

from torchwork import __version__

# Each command: (name, help, add_arguments, "module:function"). The module is a command-line module, a
# package's cli.py (tests/layers/test_cli_modules.py holds it); the function receives the parsed namespace
# and returns an exit code.
Command = tuple[str, str, Callable[[argparse.ArgumentParser], None], str]


class SuggestingParser(argparse.ArgumentParser):
    """argparse, plus "Did you mean ...?" when a command or a choice is misspelt (``torchwork trian``)."""

    def error(self, message: str) -> typing.NoReturn:
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found:
            choices = [c.strip().strip("'\"") for c in found.group(2).split(",")]  # quoted before 3.12.8
            close = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=0.5)
            if close:
                message += f". Did you mean {close[0]!r}?"
        super().error(message)

    def refuse_unknown(self, args: argparse.Namespace, unknown: list[str]) -> typing.NoReturn:
        """Refuse arguments no parser took, from the subcommand's parser, suggesting its close options."""
        target: argparse.ArgumentParser = self
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and getattr(args, "command", None) in action.choices:
                target = action.choices[args.command]
        options = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        for token in unknown:
            close = difflib.get_close_matches(token.split("=")[0], options, n=1, cutoff=0.6)
            if token.startswith("-") and close:
                hints.append(f"{token!r}: did you mean {close[0]!r}?")
        target.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" ({'; '.join(hints)})" if hints else ""))


def _digits_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=8, help="training epochs (default: 8)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def _resume_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_folder", help="a run folder: RUN_DIR/<timestamp>-<id>")
    parser.add_argument("--yes", action="store_true",
                        help="the run was started by a Python script, or its command connects to another "
                             "machine: run it again without asking (it is printed first; resume never runs any "
                             "other program the folder names)")


def _launch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=2, help="processes on this node (one per GPU)")
    parser.add_argument("--nnodes", type=int, default=1, help="number of machines (default: 1)")
    parser.add_argument("--node-rank", type=int, default=0, help="this machine's index, 0 .. nnodes-1")
    parser.add_argument("--master-addr", default=None, help="address of node 0 (needed with --nnodes > 1)")
    parser.add_argument("--master-port", type=int, default=29500, help="port on node 0 (default: 29500)")
    parser.add_argument("script", help="the training script (it builds a torchwork.Trainer)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="load a dataset and print its splits and cleaning report",
                                  description="Load a dataset and print rows per split and class.")
    profile = actions.add_parser(
        "profile", help="find whether the input pipeline or the model is the bottleneck",
        description="Run the loader (and a small model step) for a fixed number of batches at several "
                    "num_workers values; print samples/s, CPU use and what to change.")
    for sub in (describe, profile):
        sub.add_argument("dataset", help="tweets, rotten_tomatoes, fashion_mnist or digits")
        sub.add_argument("--seed", type=int, default=0, help="split and shuffle seed (default: 0)")
    profile.add_argument("--batch-size", type=int, default=64, help="batch size (default: 64)")
    profile.add_argument("--batches", type=int, default=30, help="timed batches per setting (default: 30)")
    profile.add_argument("--warmup", type=int, default=2, help="untimed batches first (default: 2)")
    profile.add_argument("--workers", default=None,
                         help="comma-separated num_workers values (default: 0, 1, 2, 4, ... up to the CPUs)")
    profile.add_argument("--model", choices=["small", "none"], default="small",
                         help="time a small real training step with each batch, or none (default: small)")
    profile.add_argument("--json", action="store_true", help="print the report as JSON")
    check = actions.add_parser(
        "check", help="the data report of your own labelled text file, before any training",
        description="Read a CSV, TSV, JSON Lines or Parquet file of texts and labels and report what is wrong "
                    "with it: duplicates, leakage across splits, conflicting labels, empty and garbled rows, "
                    "class imbalance, truncation, likely label errors. Exit code 1 when a finding is an error that fit would stop on.")
    _own_data_arguments(check)
    check.add_argument("--seed", type=int, default=0, help="split and baseline seed (default: 0)")
    check.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="a setting of fit that changes the report, as fit would read it: drop_leaked, "
                            "merge_label_variants, transformer_max_length (default, as in fit: the texts' 95th "
                            "percentile of tokens) (e.g. merge_label_variants=true)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")

def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="CHECKPOINT_OR_RUN",
                        help="a checkpoint file or a run folder, together with --model; or, alone, a model "
                             "factory (path/to/file.py:build or package.module:build returning "
                             "{'model', 'example_inputs', ...})")
    parser.add_argument("--model", metavar="FACTORY", help="factory that builds the architecture for a checkpoint")
    parser.add_argument("--format", default="pt2,onnx",
                        help="comma-separated formats: pt2, onnx, torchscript (legacy), pt2-aoti (AOTInductor, "
                             "runs without Python) (default: pt2,onnx)")
    parser.add_argument("--quantize", choices=["int8"], help="add an ONNX Runtime dynamic INT8 variant")
    parser.add_argument("-o", "--output", required=True, metavar="ARTIFACT_DIR", help="artifact directory to create")
    parser.add_argument("--allow-failed", action="store_true",
                        help="write the artifact without the formats that fail their checks (exit code 1)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing artifact directory")
    parser.add_argument("--static-batch", action="store_true", help="do not make the batch dimension dynamic")
    parser.add_argument("--torchscript-method", choices=["trace", "script"], default="trace")
    parser.add_argument("--cpp", action="store_true", help="add the C++ runner's sources (cpp/, a CMake project)")
    parser.add_argument("--verify-rounds", type=int, metavar="N",
                        help="interleaved timing rounds of the verification (default: 20; at least 5)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="dim 1 (the length) dynamic from 1 up to N only, e.g. a GPT's block_size; longer "
                             "inputs are refused")
    parser.add_argument("--select-output", metavar="INDEX_OR_KEY",
                        help="export only this output of forward(): an index into the tuple it returns (0 for "
                             "a language model's (logits, loss)) or a dict key")
    parser.add_argument("--strip-prefix", metavar="PREFIX",
                        help="strip PREFIX (e.g. 'gpt.') from the checkpoint's keys; 'auto' finds it by matching "
                             "the keys (module. and _orig_mod. are always stripped)")
    parser.add_argument("--json", action="store_true", help="print the export report as JSON")


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", metavar="ARTIFACT_DIR", help="a directory written by torchwork export")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--variants", help="comma-separated variants to check (default: all)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds (default: 20)")
    parser.add_argument("--threads", type=int, help="torch and ONNX Runtime threads (default: torch's)")
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="accuracy a quantized variant may lose (default: 0.01)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute parity tolerance (default: 1e-4)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative parity tolerance (default: 1e-3)")
    parser.add_argument("--trust", action="append", default=[], metavar="PACKAGE",
                        help="also allow the artifact's preprocessor class from this package (repeatable); "
                             "'native': load a pt2-aoti variant (a native library)")
    parser.add_argument("--cpp", action="store_true",
                        help="also build the C++ runner against the torch wheel's libtorch and add a cpp row")
    parser.add_argument("--compile", action="store_true",
                        help="also run the eager reference under torch.compile and add a compiled row "
                             "(parity, speed, compile seconds; served by torchwork serve --compile)")

def _doctor_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print {findings, exit} as JSON on stdout (the script's own stdout goes to stderr)")
    parser.add_argument("--check", action="append", metavar="ID",
                        help="run only this check (repeatable); default: every check")
    parser.add_argument("--debug", action="store_true",
                        help="keep torchwork's own frames in the script's traceback (hidden by default)")
    parser.add_argument("--user-code", action="append", metavar="PATH",
                        help="a folder, file or package name whose lines count as yours even where installed "
                             "(repeatable; default: what lies outside site-packages and pip's install folders)")
    parser.add_argument("--static", action="store_true",
                        help="do not run anything: scan the source of the files and folders given (the checks "
                             "the source decides; exit 1 on an error finding; `# torchwork: ignore[ID]` on a line)")
    parser.add_argument("--format", choices=("text", "json", "sarif", "github"),
                        help="with --static: text (default), json, sarif (SARIF 2.1.0) or github (annotations)")
    parser.add_argument("script", help="the Python script to run, unmodified (with --static: a file or folder)")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="arguments passed to the script (with --static: more files or folders)")


def _graph_arguments(parser: argparse.ArgumentParser) -> None:
    from torchwork.inspect.cli import add_arguments  # no torch import: --help stays fast

    add_arguments(parser)


def _explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default="-",
                        help="file holding a traceback or error message ('-' or nothing: standard input)")
    parser.add_argument("--json", action="store_true", help="print the explanations as JSON")


def _quickstart_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", default="sentiment", help="sentiment (default) or fashion")
    parser.add_argument("--serve", action="store_true", help="also start the server and send a few real requests")
    parser.add_argument("--quick", action="store_true", help="a small subset and fewer epochs (a first look)")
    parser.add_argument("--model", action="append", dest="set", type=lambda name: f"model={name}",
                        metavar="{ngram,transformer}",
                        help="sentiment: the model to serve: transformer (default: MiniLM fine-tuned, about 8 "
                             "minutes on 2 cores; the n-gram model is trained too, for comparison) or ngram (the "
                             "fast path, about a minute)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe setting")
    parser.add_argument("--pretrained", action="append_const", dest="set", const="pretrained=true",
                        help="fashion: also fine-tune pretrained EfficientNet-Lite0 (frozen backbone) and compare")


def _own_data_arguments(parser: argparse.ArgumentParser) -> None:
    """A user's labelled text file, its columns and test file: ``fit`` and ``data check`` read them alike."""
    parser.add_argument("data", metavar="DATA", help="your labelled texts: a .csv, .tsv, .jsonl or .parquet file; "
                                                     "or an image folder with one sub-folder per class")
    parser.add_argument("--text", metavar="COL", help="the text column (default: guessed, and printed)")
    parser.add_argument("--label", metavar="COL", help="the label column (default: guessed, and printed)")
    parser.add_argument("--test", metavar="DATA", help="your own test file (audited, not trusted)")


def _fit_arguments(parser: argparse.ArgumentParser) -> None:
    _own_data_arguments(parser)
    parser.add_argument("--model", metavar="DIR",
                        help="fine-tune this local encoder folder instead of MiniLM (BERT, DistilBERT, RoBERTa, "
                             "ELECTRA, MPNet: config.json, model.safetensors, tokenizer.json; read offline)")
    parser.add_argument("--quick", action="store_true",
                        help="the n-gram model only (minutes), not the fine-tuned MiniLM")
    parser.add_argument("--serve", action="store_true", help="also start the server and send a few test texts")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a setting of the sentiment recipe (python -m torchwork.recipes.settings "
                             "sentiment lists them), e.g. drop_leaked=true, seed=1, epochs=4")
    parser.add_argument("--json", action="store_true", help="print summary.json at the end")
    parser.add_argument("--time-budget", metavar="DURATION",
                        help="the whole command inside this time (900, 900s, 15m, 1.5h, 1h30m), tuning included: as "
                             "many trials of the learning rate, epochs and max length as fit (with --quick)")


def _train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe_or_config", help="a recipe name (sentiment, fashion) or a YAML config file")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a setting")
    parser.add_argument("--nproc", type=int, default=0, help="run on N processes with torchrun (DDP)")
    parser.add_argument("--nnodes", type=int, default=1, help="number of machines (default: 1)")
    parser.add_argument("--node-rank", type=int, default=0, help="this machine's index")
    parser.add_argument("--master-addr", default=None, help="address of node 0 (with --nnodes > 1)")
    parser.add_argument("--master-port", type=int, default=29500, help="port on node 0")

def _env_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the snapshot as JSON (for env diff)")
    actions = parser.add_subparsers(dest="env_command", metavar="ACTION")
    check = actions.add_parser(
        "check", help="known-answer tests of the ops a model relies on (exit 1 on a failure)",
        description="Run matmul, conv2d, softmax, layer_norm, a backward pass, autocast, a DataLoader with "
                    "workers and a save/load round trip against float64 values computed without torch (and "
                    "CPU against GPU when there is one). Exit 0 when all pass, 1 otherwise.")
    check.add_argument("--artifact", metavar="ARTIFACT_DIR",
                       help="also replay the inputs this artifact recorded at export and compare the outputs")
    check.add_argument("--json", action="store_true", help="print the results as JSON")
    lock = actions.add_parser("lock", help="exact pins of every installed distribution (pip constraints)",
                              description="Print name==version for every installed distribution, with Python, "
                                          "platform and torch build in a header; usable with pip install -c.")
    lock.add_argument("-o", "--output", metavar="FILE", help="write the lock file here instead of stdout")
    diff = actions.add_parser(
        "diff", help="differences between two environments, most risky first (exit 1 when they differ)",
        description="A and B: snapshots (torchwork env --json), lock files (pip freeze / torchwork env lock), "
                    "run folders or artifact directories.")
    diff.add_argument("a", metavar="A", help="snapshot, lock file, run folder or artifact directory")
    diff.add_argument("b", metavar="B", help="the same kinds as A")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")


def _runs_arguments(parser: argparse.ArgumentParser) -> None:
    from torchwork.runs.cli import add_arguments  # no torch import: --help stays fast

    add_arguments(parser)


def _tune_arguments(parser: argparse.ArgumentParser) -> None:
    from torchwork.tune.cli import add_arguments  # no torch or optuna import: --help stays fast

    add_arguments(parser)


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from torchwork.serve.cli import add_arguments  # no torch or fastapi import: --help stays fast

    add_arguments(parser)


COMMANDS: list[Command] = [
    ("digits", "train a small classifier on scikit-learn's digits with the engine and print a summary",
     _digits_arguments, "torchwork.recipes.cli:cli_digits"),
    ("fit", "your own labelled texts (a file) or images (a folder) to a served model: the data report, "
            "baselines, fine-tuning, evaluation, "
            "INT8 export, verification", _fit_arguments, "torchwork.recipes.cli:cli_fit"),
    ("quickstart", "the main job: dirty tweets to a trained, quantized, verified and servable model",
     _quickstart_arguments, "torchwork.recipes.cli:cli_quickstart"),
    ("train", "run a recipe from its name or a YAML config, with --set overrides (--nproc for DDP)",
     _train_arguments, "torchwork.recipes.cli:cli_train"),
    ("tune", "tune a recipe's settings on Optuna: trials as run folders, pruned, parallel, crash-safe; "
             "'tune show STUDY' prints the trials", _tune_arguments, "torchwork.tune.cli:cli_main"),
    ("resume", "continue a run from its newest valid checkpoint: re-run its recorded torchwork command "
               "(or, with --yes, its Python script)",
     _resume_arguments, "torchwork.runs.cli:cli_resume"),
    ("launch", "run a training script on several processes / machines with torchrun (DDP)",
     _launch_arguments, "torchwork.distributed.cli:cli_launch"),
    ("data", "datasets: check your own file before training, describe a dataset's splits, or profile the input "
             "pipeline", _data_arguments, "torchwork.recipes.cli:cli_data"),
    ("export", "export a model to a checked artifact directory (pt2, ONNX, TorchScript; optional INT8)",
     _export_arguments, "torchwork.deploy.cli:cli_export"),
    ("verify", "compare an artifact's variants with eager on held-out inputs: parity, speed, size",
     _verify_arguments, "torchwork.deploy.cli:cli_verify"),
    ("doctor", "run a training script unmodified and report the classic PyTorch mistakes with file:line",
     _doctor_arguments, "torchwork.doctor.cli:cli_doctor"),
    ("graph", "draw the autograd graph of a script's first backward() or of a model: unreached parameters "
     "with the reason, saved-tensor memory by module", _graph_arguments, "torchwork.inspect.cli:cli_main"),
    ("explain", "explain a pasted PyTorch traceback or error message: cause and fix",
     _explain_arguments, "torchwork.doctor.cli:cli_explain"),
    ("runs", "the run folders read back: ls (one row per run), show RUN, diff RUN_A RUN_B (what changed and "
             "which change most likely explains the metric)", _runs_arguments, "torchwork.runs.cli:cli_main"),
    ("env", "this machine's environment: report, known-answer check, lock, diff against another",
     _env_arguments, "torchwork.env.cli:cli_main"),
    ("serve", "serve a model over HTTP (FastAPI + uvicorn) with dynamic batching, health and metrics",
     _serve_arguments, "torchwork.serve.cli:cli_main"),
]


# Old command name -> (new name, the release that removes the old one). The old name still runs the command,
# after one line on stderr (`torchwork demo` trained digits while `make demo` runs the quickstart).
RENAMED_COMMANDS: dict[str, tuple[str, str]] = {"demo": ("digits", "0.3.0")}


def build_parser() -> SuggestingParser:
    parser = SuggestingParser(
        prog="torchwork",
        description="PyTorch engineering practice as software: train, resume, export, serve, diagnose.",
    )
    parser.add_argument("--version", action="version", version=f"torchwork {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text, add_arguments, target in COMMANDS:
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(command_parser)
        command_parser.set_defaults(_target=target)
        for old in (old for old, (new, _) in RENAMED_COMMANDS.items() if new == name):
            alias = sub.add_parser(old, help=f"deprecated: the old name of '{name}'", description=help_text)
            add_arguments(alias)
            alias.set_defaults(_target=target)
    return parser


# Commands that run a user's script: as with ``python``, ``torchrun`` or ``python -m pdb``, everything after the
# script is the script's (its own --json, -o or --debug); the command's options go before it.
SCRIPT_RUNNERS = ("doctor", "graph")


def script_arguments(after: Sequence[str]) -> list[str]:
    """What the script gets of what follows it: all of it, less one ``--`` right after the script (once the
    way to hand the script options that the command also has; still accepted).

    >>> script_arguments(["--json", "-o", "x.html"])
    ['--json', '-o', 'x.html']
    >>> script_arguments(["--", "--json"])
    ['--json']
    """
    return list(after[1:]) if after[:1] == ["--"] else list(after)


def misplaced_options(command_parser: argparse.ArgumentParser, script_args: Sequence[str]) -> list[str]:
    """The script's arguments that are also the command's own options: worth a hint if the script fails.

    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--json", action="store_true")
    >>> misplaced_options(parser, ["--epochs", "3", "--json"])
    ['--json']
    """
    own = {option for action in command_parser._actions for option in action.option_strings} - {"-h", "--help"}
    return [token for token in script_args if token.split("=", 1)[0] in own]


def _static_paths_and_options(command_parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``doctor --static`` runs nothing: what follows its first path is more paths and its own options, in any
    order (``torchwork doctor --static src --format sarif``)."""
    options = argparse.ArgumentParser(prog="torchwork doctor --static", add_help=False)
    for action in command_parser._actions:
        if action.option_strings and action.dest != "help":
            options._add_action(action)
    options.add_argument("paths", nargs="*")
    options.parse_intermixed_args(args.args, namespace=args)
    args.args = args.paths


def _hint_misplaced(command: str, misplaced: Sequence[str]) -> None:
    """After a failure: the command's own options that went to the script, and where they belong."""
    if misplaced:
        print(f"torchwork: note: {' '.join(misplaced)} after the script went to the script, as everything after "
              f"it does; torchwork {command}'s own options go before the script: torchwork {command} "
              f"{' '.join(misplaced)} SCRIPT.py ...", file=sys.stderr)


def _graph_of_a_factory(args: argparse.Namespace) -> bool:
    if args.command != "graph":
        return False
    from torchwork.inspect.cli import is_factory

    return is_factory(args.target)


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    raise KeyError(command)


# Options whose value may start with '-' (argparse reads `--sort -seed` as two options): the command, the option
DASH_VALUES = {("runs", "--sort"), ("fit", "--time-budget")}


def joined_dash_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--sort -seed`` written ``--sort=-seed`` for the options of :data:`DASH_VALUES`, so that
    the documented reversed sort parses (a negative budget is then refused by name, not as a missing value).

    Example:
        >>> joined_dash_values(["runs", "ls", "runs", "--sort", "-seed"])
        ['runs', 'ls', 'runs', '--sort=-seed']
    """
    out = list(argv)
    command = out[0] if out else None
    i = 0
    while i < len(out) - 1:
        if (command, out[i]) in DASH_VALUES and out[i + 1].startswith("-") and out[i + 1] != "--":
            out[i:i + 2] = [f"{out[i]}={out[i + 1]}"]
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(joined_dash_values(sys.argv[1:] if argv is None else argv))
    if unknown:
        parser.refuse_unknown(args, unknown)
    misplaced: list[str] = []
    if getattr(args, "static", False) and getattr(args, "args", None):
        _static_paths_and_options(_command_parser(parser, args.command), args)
    elif getattr(args, "command", None) in SCRIPT_RUNNERS and getattr(args, "args", None):
        args.args = script_arguments(args.args)
        if not _graph_of_a_factory(args):  # after MODULE:FACTORY, graph reads its own options
            misplaced = misplaced_options(_command_parser(parser, args.command), args.args)
    if not getattr(args, "_target", None):
        parser.print_help()
        return 0
    if args.command in RENAMED_COMMANDS:
        from torchwork.deprecation import renamed_command

        print(renamed_command("torchwork", args.command, *RENAMED_COMMANDS[args.command]), file=sys.stderr)
    module_name, function_name = args._target.split(":")
    from torchwork.threads import passive_waiting

    passive_waiting()  # before torch loads: idle OpenMP threads sleep, not spin against a neighbour
    function = getattr(importlib.import_module(module_name), function_name)
    from torchwork.errors import TorchworkError

    try:
        code = int(function(args) or 0)
        if code or getattr(args, "script_exit", 0):
            _hint_misplaced(args.command, misplaced)
        sys.stdout.flush()  # here, so that a closed pipe (``| head``) is caught below, not at exit
        return code
    except BrokenPipeError:  # the reader stopped reading: not an error worth a traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command cut off by its pipe
    except TorchworkError as error:
        print(f"torchwork: error: {error}", file=sys.stderr)
        _hint_misplaced(args.command, misplaced)
        return 2
    except KeyboardInterrupt as interrupted:  # one line, not a traceback through torchwork's internals
        print(f"torchwork: {str(interrupted) or 'interrupted'}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
