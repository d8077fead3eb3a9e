"""One job per function and per file: no function over 100 lines and no module over 600 in src/torchwork.

A function's lines run from its ``def`` (decorators left out) to its last line, nested functions included;
a module's are its physical lines. An exception needs a one-line reason in the list below, and leaves the
list when it is split.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "torchwork"
MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 600

# "path" (a module) or "path:function" -> why it is still this long (one line each).
ALLOWED: dict[str, str] = {
}


def functions_over(path: Path, limit: int) -> list[tuple[str, int]]:
    """(qualified name, lines) of each function in ``path`` longer than ``limit`` lines."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.end_lineno is not None:
                    lines = child.end_lineno - child.lineno + 1
                    if lines > limit:
                        found.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def oversized() -> dict[str, int]:
    """``{"path:function" or "path": lines}`` over the limits."""
    found: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found[relative] = lines
        for name, length in functions_over(path, MAX_FUNCTION_LINES):
            found[f"{relative}:{name}"] = length
    return found


def test_no_function_or_module_is_over_its_limit() -> None:
    found = oversized()
    unexplained = [f"{place} ({lines} lines)" for place, lines in found.items() if place not in ALLOWED]
    assert not unexplained, (f"over {MAX_FUNCTION_LINES} lines a function or {MAX_MODULE_LINES} a module: split it, "
                             "or add '\"path[:function]\": \"reason\",' to ALLOWED in tests/layers/test_sizes.py:\n"
                             + "\n".join(unexplained))
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"within the limits now: remove from ALLOWED in tests/layers/test_sizes.py: {stale}"


def test_nested_functions_count_inside_their_parent(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    body = "".join(f"        x{i} = {i}\n" for i in range(3))
    module.write_text(f"class A:\n    def run(self):\n        def inner():\n            return 1\n{body}")
    assert functions_over(module, 5) == [("A.run", 6)]
    assert functions_over(module, 6) == []
