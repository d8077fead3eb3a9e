"""The layer table, held by a test: every package of torchwork in one ordered list, bottom to top, and no
import climbs it, whether it runs at import time, inside a function, or only for a type checker. A
package's command-line module (``cli.py``, ``*/cli.py``) is the top layer: it composes what lies below and
only another command-line module imports it. No two modules import each other at run time, directly or
through others (a circle).

docs/architecture.md draws the same table; change both together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torchwork

SRC = Path(torchwork.__file__).parent

# Bottom to top. The base is torchwork's top-level modules (errors, files, lazy, seeding, locations, ...);
# "api" is the lazy public API, torchwork/__init__.py (Trainer, EarlyStopping, seed_everything, the errors).
LAYERS: list[str] = [
    "base",
    "data",
    "report",
    "env",
    "runs",
    "distributed",
    "inspect",
    "doctor",
    "engine",
    "api",
    "finetune",
    "deploy",
    "serve",
    "recipes",
    "tune",
    "cli",
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module == "torchwork":
        return "api"
    if parts[-1] == "cli":
        return "cli"
    if len(parts) >= 2 and (SRC / parts[1]).is_dir():
        return parts[1]
    return "base"


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Ids of the import nodes under ``if TYPE_CHECKING:``: a type checker reads them, nothing runs them."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return ids


def imports_of(path: Path, *, run_time_only: bool = False) -> list[tuple[int, str]]:
    """Every torchwork module ``path`` imports (at any depth of the file), with its line; ``run_time_only``
    leaves out the imports only a type checker reads."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = _type_checking_only(tree) if run_time_only else set()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            for alias in node.names:  # `from torchwork.deploy import replay` names a module too
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if _is_module(candidate) else base))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.Call) and (named := _imported_by_call(node)):
            found.append((node.lineno, named))
    return [(line, name) for line, name in found if name == "torchwork" or name.startswith("torchwork.")]


def _imported_by_call(call: ast.Call) -> str | None:
    """The module ``__import__("torchwork")`` or ``importlib.import_module("torchwork.x")`` names; of an
    f-string (``f"torchwork.doctor.checks.{name}"``), the package its constant start names."""
    function = ast.unparse(call.func)
    if function not in ("__import__", "importlib.import_module", "import_module") or not call.args:
        return None
    argument = call.args[0]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    if isinstance(argument, ast.JoinedStr) and argument.values and isinstance(argument.values[0], ast.Constant):
        start = str(argument.values[0].value)
        return start.rsplit(".", 1)[0] if "." in start else None
    return None


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (SRC / relative).with_suffix(".py").is_file() or (SRC / relative / "__init__.py").is_file()


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def test_every_package_is_in_the_table() -> None:
    packages = {path.name for path in SRC.iterdir() if (path / "__init__.py").is_file()}
    assert packages <= set(LAYERS), f"add {sorted(packages - set(LAYERS))} to LAYERS (and the architecture page)"


def test_no_import_climbs_the_table() -> None:
    climbs = []
    for name, path in all_modules().items():
        mine = LAYERS.index(layer_of(name))
        for line, target in imports_of(path):
            theirs = layer_of(target)
            if LAYERS.index(theirs) > mine:
                climbs.append(f"{path.relative_to(SRC.parent)}:{line} ({layer_of(name)}) imports {target} ({theirs})")
    assert climbs == [], "imports that climb the layer table:\n" + "\n".join(climbs)


def test_only_a_command_line_module_imports_one() -> None:
    """A command line composes others (``torchwork doctor --static`` is doctor/static/cli.py, ``torchwork data
    describe`` data/cli.py); a work module importing one would reach back up into printing and exit codes."""
    offenders = [f"{path.relative_to(SRC.parent)}:{line} imports {target}"
                 for name, path in all_modules().items() for line, target in imports_of(path)
                 if layer_of(target) == "cli" and layer_of(name) != "cli"]
    assert offenders == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other() -> None:
    """Run-time imports only: ``Graph`` annotated in the module that renders it is not a circle."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.name == "__init__.py":  # a package's lazy table names its modules; importing them is one way
            continue
        graph[name] = {target for _, target in imports_of(path, run_time_only=True)
                       if target in modules and not modules[target].name == "__init__.py" and target != name}
    assert _cycles(graph) == []


def test_the_walker_sees_imports_by_call(tmp_path: Path) -> None:
    module = tmp_path / "calls.py"
    module.write_text('import importlib\n\n\ndef f(name):\n    __import__("torchwork").__version__\n'
                      '    importlib.import_module("torchwork.engine.trainer")\n'
                      '    importlib.import_module(f"torchwork.doctor.checks.{name}")\n'
                      '    importlib.import_module(name)\n    __import__("os")\n')
    assert sorted(imports_of(module)) == [(5, "torchwork"), (6, "torchwork.engine.trainer"),
                                          (7, "torchwork.doctor.checks")]


def test_the_walker_sees_lazy_imports() -> None:
    trainer = SRC / "engine" / "trainer.py"
    assert "torchwork.doctor.guard" in {target for _, target in imports_of(trainer)}
