"""No dead definitions: every top-level function, class and constant of src/torchwork is named somewhere else
in the repository (its own code, the tests, the docs, the examples or the benchmarks).

A word search, not an import graph: a name that appears only at its own definition is used by nothing. Ruff
(F401, F811, F841) finds unused imports and locals within a file, not a definition no other line names; vulture
is not in the development tools.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "torchwork"
READ = ("src", "tests", "docs", "examples", "benchmarks")
SUFFIXES = {".py", ".md", ".toml", ".txt", ".sh", ".yaml", ".yml", ".cpp", ".h"}

# "path:name": the reason it stays although nothing names it (one line each).
ALLOWED: dict[str, str] = {
    "tune/pruning.py:DEFAULT_PRUNER": "owned elsewhere this session (tune)",
}


def top_level_names(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append(node.name)
        elif isinstance(node, ast.Assign):
            found.extend(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append(node.target.id)
    return [name for name in found if not (name.startswith("__") and name.endswith("__"))]


def word_counts(files: list[Path]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for path in files:
        if path.is_file() and "__pycache__" not in path.parts and path != Path(__file__).resolve():
            counts.update(re.findall(r"\w+", path.read_text(errors="replace")))
    return counts


def dead_definitions(base: Path, counts: Counter[str]) -> list[str]:
    """``path:name`` of each top-level name under ``base`` that ``counts`` holds once at most (its definition)."""
    return [f"{path.relative_to(base).as_posix()}:{name}" for path in sorted(base.rglob("*.py"))
            for name in top_level_names(path) if counts[name] <= 1]


def test_every_definition_is_used_somewhere() -> None:
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    files += [path for folder in READ for path in (ROOT / folder).rglob("*") if path.suffix in SUFFIXES]
    dead = dead_definitions(SRC, word_counts(files))
    unexplained = [place for place in dead if place not in ALLOWED]
    assert not unexplained, ("defined in src/torchwork and named nowhere else (remove them, or add "
                             "'path:name': 'reason' to ALLOWED in tests/layers/test_dead_definitions.py):\n"
                             + "\n".join(unexplained))
    stale = sorted(set(ALLOWED) - set(dead))
    assert not stale, f"used (or gone) now: remove from ALLOWED in tests/layers/test_dead_definitions.py: {stale}"


def test_a_name_only_its_definition_holds_is_dead(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("LIMIT = 3\n\n\nclass Box:\n    pass\n\n\ndef _helper() -> int:\n    return LIMIT\n")
    assert dead_definitions(tmp_path, word_counts([module])) == ["m.py:Box", "m.py:_helper"]
