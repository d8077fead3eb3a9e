"""The imports run one way: data -> engine -> runs. runs never imports the engine, data never imports runs
(nor the engine); checked over the source with ast, lazy imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import torchwork

SRC = Path(torchwork.__file__).parent


def _imports(package: str) -> list[tuple[str, str]]:
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path.name, node.module))
            elif isinstance(node, ast.Import):
                found.extend((path.name, alias.name) for alias in node.names)
    return found


def _offending(package: str, forbidden: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(f, m) for f, m in _imports(package) if any(m == x or m.startswith(x + ".") for x in forbidden)]


def test_the_walker_sees_imports() -> None:
    assert ("trainer.py", "torchwork.runs.resume") in _imports("engine")


def test_runs_does_not_import_the_engine() -> None:
    assert _offending("runs", ("torchwork.engine",)) == []


def test_data_imports_neither_runs_nor_the_engine() -> None:
    assert _offending("data", ("torchwork.runs", "torchwork.engine")) == []
