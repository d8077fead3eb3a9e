"""No private reach through objects: a module reads ``obj._name`` only when ``_name`` is its own, so that what a
class keeps private can change without a search (issue #50: the loop, the epoch and the compile measurement
used the Trainer's ``_run_window``, ``_save_checkpoint``, ``_say``, ...).

For each module of src/torchwork, the private names it defines: ``def _x``, ``class _X``, ``self._x = ...`` (and
``cls._x``), a class body's or the module's ``_x = ...``. An attribute read ``expr._x`` is a reach when ``expr``
is not ``self``, ``cls`` or ``super()``, ``_x`` is not defined in the same module, and some other torchwork module
defines it. Dunder names are exempt, and so is ``expr._x`` on a standard-library or third-party module
(``os._exit``). tests/layers/test_private_names.py covers the other kind of reach: ``from m import _x``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "torchwork"

# Private attributes of other libraries' objects that torchwork reads on purpose: a torchwork module that
# happens to define the same name does not make these reads a reach (name -> what it is, one line each).
FOREIGN: dict[str, str] = {
    "_version": "torch.Tensor._version: autograd's in-place counter (the doctor's in-place checks, carried state)",
    "_base": "torch.Tensor._base: the tensor a view looks into (the doctor's view checks)",
    "_storage": "optuna.Study._storage: the storage a study runs on (tune's trials and their recovery)",
    "_schema": "torch OpOverload._schema: an operator's argument names and types (pt2_program's file-name check)",
}
# "path: expr._x" -> why it stays for now (one line each).
ALLOWED: dict[str, str] = {}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _assigned(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        yield from ast.walk(target)  # tuples, starred names: every name and attribute in them


def _body_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's or a class's own statements assign."""
    found: set[str] = set()
    for node in body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.update(target.id for target in _assigned(targets) if isinstance(target, ast.Name))
    return found


def _own(expr: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: the object's own attributes."""
    if isinstance(expr, ast.Name):
        return expr.id in ("self", "cls")
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"


def _root(expr: ast.expr) -> str | None:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


class ModuleNames:
    """What one walk over a module finds: the private names it defines (functions, classes, ``self._x`` and
    ``cls._x``, class or module level ``_x``), the names it imports from outside torchwork, and every read of
    a private attribute on something other than ``self``, ``cls`` or ``super()``."""

    def __init__(self, tree: ast.Module) -> None:
        defined = _body_names(tree.body)
        self.outside: set[str] = set()
        self.reads: list[ast.Attribute] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if _is_private(node.attr) and not _own(node.value):
                    self.reads.append(node)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.update(target.attr for target in _assigned(targets) if isinstance(target, ast.Attribute)
                               and isinstance(target.value, ast.Name) and target.value.id in ("self", "cls"))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.add(node.name)
                if isinstance(node, ast.ClassDef):
                    defined.update(_body_names(node.body))
            elif isinstance(node, ast.Import):
                self.outside.update((alias.asname or alias.name).split(".")[0] for alias in node.names
                                    if not alias.name.startswith("torchwork"))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and not node.module.startswith("torchwork"):
                self.outside.update(alias.asname or alias.name for alias in node.names)
        self.defined = {name for name in defined if _is_private(name)}


def attribute_reaches(src: Path) -> list[str]:
    """``path:line expr._x (defined in other/module.py)`` for each reach under ``src`` (see the module)."""
    modules = {path.relative_to(src).as_posix(): ModuleNames(ast.parse(path.read_text(), filename=str(path)))
               for path in sorted(src.rglob("*.py"))}
    homes: dict[str, list[str]] = {}
    for path, names in modules.items():
        for name in names.defined:
            homes.setdefault(name, []).append(path)
    found: list[tuple[str, int, str]] = []
    for path, names in modules.items():
        for node in names.reads:
            if node.attr in names.defined or node.attr not in homes or node.attr in FOREIGN:
                continue
            if _root(node.value) in names.outside:
                continue
            found.append((path, node.lineno, f"{ast.unparse(node.value)}.{node.attr} "
                                             f"(defined in {', '.join(sorted(homes[node.attr]))})"))
    return [f"{path}:{line} {what}" for path, line, what in sorted(found)]


def _key(reach: str) -> str:
    """``path: expr._x``: an ALLOWED key, which survives edits that move lines."""
    place, what = reach.split(" ", 1)
    return f"{place.rsplit(':', 1)[0]}: {what.split(' (', 1)[0]}"


def test_no_module_reads_another_modules_private_attributes() -> None:
    reaches = attribute_reaches(SRC)
    unexplained = [reach for reach in reaches if _key(reach) not in ALLOWED]
    assert not unexplained, (
        "private attributes read outside the module that defines them (give the owner a public method or "
        "attribute, hand the reader what it needs, or add 'path: expr._x': 'reason' to ALLOWED in "
        "tests/layers/test_private_attributes.py):\n" + "\n".join(unexplained))
    stale = sorted(set(ALLOWED) - {_key(reach) for reach in reaches})
    assert not stale, f"no longer reached: remove from ALLOWED in tests/layers/test_private_attributes.py: {stale}"


def test_the_scan_sees_a_reach_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "owner.py").write_text(
        "_version = 3\n\n\ndef _exit():\n    pass\n\n\nclass Owner:\n    _kind = 'a'\n\n    def __init__(self):\n        self._count, self.shown = 0, 1\n\n"
        "    def _tick(self):\n        self._count += 1\n        return super()._tick(), self.__dict__\n")
    (tmp_path / "user.py").write_text(
        "import os\nfrom torch import Tensor\n\n\ndef use(owner, tensor, module):\n"
        "    owner._tick()\n    module.owner._count = owner._kind\n"
        "    return os._exit, Tensor._tick, tensor._version, owner.__class__, owner._elsewhere, owner.shown\n")
    assert attribute_reaches(tmp_path) == [
        "user.py:6 owner._tick (defined in owner.py)",
        "user.py:7 module.owner._count (defined in owner.py)",
        "user.py:7 owner._kind (defined in owner.py)",
    ]


def test_a_module_may_read_its_own_private_names_on_any_object(tmp_path: Path) -> None:
    (tmp_path / "parts.py").write_text(
        "class Part:\n    def _keep(self, rows):\n        self._rows = rows\n\n\n"
        "def split(whole):\n    part = Part()\n    part._keep(whole._rows)\n    return part\n")
    assert attribute_reaches(tmp_path) == []
