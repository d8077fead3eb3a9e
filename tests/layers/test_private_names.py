"""No private reach: a module uses another module's ``_name`` neither through ``from x import _name`` nor as
``x._name`` on an imported torchwork module. What a module keeps private can then change without a search.

A package's ``__init__`` importing its own modules' private names is still a reach; a module's own names and
the dunder names (``__version__``) are not.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "torchwork"

# "path: what it reaches" -> the reason it stays for now (one line each).
ALLOWED: dict[str, str] = {}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(path: Path) -> list[str]:
    """``module._name`` for each private name of another torchwork module that ``path`` uses."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules: dict[str, str] = {}  # local name -> torchwork module, for attribute access
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchwork"):
            for alias in node.names:
                if _is_private(alias.name):
                    found.append(f"{node.module}.{alias.name}")
                else:
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("torchwork"):
                    modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = ast.unparse(node.value)
            if owner in modules:
                found.append(f"{modules[owner]}.{node.attr}")
    return sorted(set(found))


def test_no_module_uses_another_modules_private_names() -> None:
    reaches = {f"{path.relative_to(SRC).as_posix()}: {target}": path for path in sorted(SRC.rglob("*.py"))
               for target in private_reaches(path)}
    unexplained = [reach for reach in reaches if reach not in ALLOWED]
    assert not unexplained, ("private names used from another module (make them public, move them, or add "
                             "'path: module._name': 'reason' to ALLOWED in tests/layers/test_private_names.py):\n"
                             + "\n".join(unexplained))
    stale = sorted(set(ALLOWED) - set(reaches))
    assert not stale, f"no longer reached: remove from ALLOWED in tests/layers/test_private_names.py: {stale}"


def test_the_scan_sees_both_kinds_of_reach(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from torchwork.report.plots import _figure, curves_png\nfrom torchwork.deploy import plan\n"
                      "import torchwork.paths as paths\n\n\ndef f():\n    return plan._checked, paths._kind, "
                      "curves_png._cache, _own, __version__\n")
    assert private_reaches(module) == ["torchwork.deploy.plan._checked", "torchwork.paths._kind",
                                       "torchwork.report.plots._figure", "torchwork.report.plots.curves_png._cache"]
