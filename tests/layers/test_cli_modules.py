"""Every command-line module is a ``cli.py``: the functions that turn parsed arguments (an
``argparse.Namespace``) into work, print and return an exit code live in a package's ``cli.py`` (the top
layer of tests/layers/test_layers.py, which may compose anything below it); the top-level parser's table
names only such modules; and a ``python -m torchwork.X`` entry point outside them is one a process runs, each
listed below with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torchwork
from torchwork.cli import COMMANDS

SRC = Path(torchwork.__file__).parent

# ``python -m`` entry points outside a cli.py, and why each stays where it is.
PROCESS_ENTRY_POINTS = {
    "tune/worker.py": "a study's worker process, started by torchwork tune (tune/runner.py), never by a user",
    "recipes/settings.py": "prints a recipe's settings table: docs/recipes.md's output markers run it (docs/tools/docs_output.py)",
}


def is_command_line_module(path: Path) -> bool:
    return path.name == "cli.py"


def _annotation_is_namespace(argument: ast.arg) -> bool:
    if argument.annotation is None:
        return False
    text = ast.unparse(argument.annotation).strip("'\"")
    return text in ("argparse.Namespace", "Namespace") or text.startswith(("argparse.Namespace |", "Namespace |"))


def _is_command_entry(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``cli_x(args)``, ``x_main(args)`` or ``main(args)``: a command's entry point whatever ``args``'s type says."""
    name = function.name
    named = name == "main" or name.startswith("cli_") or name.endswith("_main")
    positional = [*function.args.posonlyargs, *function.args.args]
    return named and bool(positional) and positional[0].arg == "args"


def command_functions(source: str, filename: str = "<source>") -> list[str]:
    """The functions of ``source`` that take parsed command-line arguments: a parameter annotated
    ``argparse.Namespace``, or a command's entry point by its name and its ``args`` parameter.

    >>> command_functions("import argparse\\ndef run(args: argparse.Namespace) -> int: ...")
    ['run:2']
    >>> command_functions("from types import SimpleNamespace\\ndef run(config: SimpleNamespace): ...")
    []
    """
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        every = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        if any(_annotation_is_namespace(argument) for argument in every) or _is_command_entry(node):
            found.append(f"{node.name}:{node.lineno}")
    return found


def test_only_a_cli_module_takes_parsed_arguments() -> None:
    offenders = [f"{path.relative_to(SRC)}: {name}" for path in sorted(SRC.rglob("*.py"))
                 if not is_command_line_module(path) for name in command_functions(path.read_text(), str(path))]
    assert offenders == [], ("functions that take parsed command-line arguments outside a cli.py (move them to "
                             "their package's cli.py):\n" + "\n".join(offenders))


def dispatch_offenders(commands: list[tuple[str, str]]) -> list[str]:
    """The (command, "module:function") pairs whose module is not a cli.py of torchwork that defines it.

    >>> dispatch_offenders([("serve", "torchwork.serve.server:cli_main")])
    ["serve -> torchwork.serve.server:cli_main: 'torchwork.serve.server' is not a cli.py module"]
    """
    found = []
    for command, target in commands:
        module, _, function = target.partition(":")
        path = SRC.parent.joinpath(*module.split(".")).with_suffix(".py")
        if module.rsplit(".", 1)[-1] != "cli":
            found.append(f"{command} -> {target}: {module!r} is not a cli.py module")
        elif not path.is_file():
            found.append(f"{command} -> {target}: no file {path}")
        elif function not in {node.name for node in ast.parse(path.read_text()).body
                              if isinstance(node, ast.FunctionDef)}:
            found.append(f"{command} -> {target}: {path.name} defines no function {function!r}")
    return found


def test_every_command_dispatches_to_a_cli_module() -> None:
    assert dispatch_offenders([(name, target) for name, _, _, target in COMMANDS]) == []


def test_a_table_naming_a_work_module_is_caught() -> None:
    """The check itself can fail: the old table's targets (before every command moved to a cli.py)."""
    old = [("fit", "torchwork.tune.budget:fit_main"), ("resume", "torchwork.runs.relaunch:main"),
           ("digits", "torchwork.recipes.cli:no_such_function")]
    assert len(dispatch_offenders(old)) == 3


def _main_guards(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)
               for node in tree.body)


def test_python_dash_m_entry_points_outside_cli_modules_are_the_listed_ones() -> None:
    found = {str(path.relative_to(SRC)) for path in sorted(SRC.rglob("*.py"))
             if not is_command_line_module(path) and _main_guards(path)}
    assert found == set(PROCESS_ENTRY_POINTS), (
        "a `python -m` entry point outside a cli.py: move the command to its package's cli.py (a torchwork "
        "subcommand), or list it in PROCESS_ENTRY_POINTS with the reason a process, not a user, runs it")
