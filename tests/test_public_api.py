"""The public API: what torchwork and its subpackages export, the error hierarchy, and the type check's list.

The public API is the names exported by ``torchwork/__init__.py`` and by each subpackage ``__init__``'s
``__all__``; the modules that define them are the files mypy checks ([tool.mypy] in pyproject.toml).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torchwork
import torchwork.errors as errors

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# Packages whose public modules are left out of the type check for now, with the reason (none today).
NOT_YET_CHECKED: dict[str, str] = {}
# Checked although no __init__ exports from them: the lazy mechanism, and the training step (read on its own).
ALSO_CHECKED = {"torchwork.lazy", "torchwork.engine.step"}


def public_packages() -> list[str]:
    """torchwork and every subpackage whose ``__init__`` declares ``__all__``."""
    found = ["torchwork"]
    for info in pkgutil.iter_modules(torchwork.__path__, "torchwork."):
        if info.ispkg and "__all__" in (SRC / info.name.replace(".", "/") / "__init__.py").read_text():
            found.append(info.name)
    return found


def defining_modules(package: str) -> set[str]:
    """The package itself and the modules that define its exported names."""
    module = importlib.import_module(package)
    lazy = getattr(module, "_LAZY", None)
    if lazy is not None:
        return {package, *lazy.values()}
    return {package, *(getattr(module, name).__module__ for name in module.__all__)}


def module_file(name: str) -> str:
    path = SRC / name.replace(".", "/")
    return str((path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).relative_to(ROOT))


@pytest.mark.parametrize("package", public_packages())
def test_every_exported_name_resolves_and_is_listed(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, package
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
        assert name in dir(module), f"{package}.{name} is missing from dir()"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_subpackages_export_lazily_without_torch() -> None:
    # Lazy packages import nothing heavy until a name is used: `torchwork --help` must not import torch.
    lazy = [p for p in public_packages() if hasattr(importlib.import_module(p), "_LAZY")]
    code = "import sys\n" + "".join(f"import {p}\n" for p in lazy) + "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False", lazy
    assert {"torchwork", "torchwork.data", "torchwork.deploy", "torchwork.doctor", "torchwork.env", "torchwork.finetune",
            "torchwork.inspect", "torchwork.serve"} <= set(lazy)


def test_mypy_checks_exactly_the_public_modules() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    public = set().union(*(defining_modules(p) for p in public_packages())) | ALSO_CHECKED
    expected = {module_file(m) for m in public if not m.startswith(tuple(NOT_YET_CHECKED))}
    listed = set(config["files"])
    assert not expected - listed, f"public modules to add to [tool.mypy] files: {sorted(expected - listed)}"
    assert not listed - expected, f"not public (or not checked yet): {sorted(listed - expected)}"
    assert config["follow_imports"] == "silent"


# ------------------------------------------------------------------------------------------- errors
def every_error_class() -> set[type[BaseException]]:
    found, todo = set(), [errors.TorchworkError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo.extend(cls.__subclasses__())
    return {c for c in found if c.__module__.startswith("torchwork.")}


def test_every_error_class_is_defined_in_errors_py() -> None:
    names = {cls.__name__ for cls in every_error_class()}
    strays = [f"{path.relative_to(ROOT)}: {match.group(1)}"
              for path in sorted((SRC / "torchwork").rglob("*.py")) if path.name != "errors.py"
              for match in re.finditer(r"^\s*class (\w+)\(([^)]*)\)", path.read_text(), re.M)
              if names & {base.strip().split(".")[-1] for base in match.group(2).split(",")}]
    assert not strays, f"define error classes in torchwork/errors.py (and draw them in its tree): {strays}"


def drawn_tree() -> dict[str, str | None]:
    """``{class name: parent name}`` from the tree in torchwork/errors.py's docstring."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^ {4}((?:[│ ] {3})*)(?:[├└]── )?([A-Z]\w+Error)\b", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        stack[depth:] = [match.group(2)]
        parents[match.group(2)] = stack[depth - 1] if depth else None
    return parents


def test_the_docstring_draws_the_whole_hierarchy() -> None:
    tree = drawn_tree()
    classes = {cls.__name__: cls for cls in every_error_class()}
    assert set(tree) == set(classes)
    for name, parent in tree.items():
        torchwork_bases = [b.__name__ for b in classes[name].__bases__ if issubclass(b, errors.TorchworkError)]
        assert torchwork_bases == ([parent] if parent else []), name


def test_the_package_root_exports_every_error_class() -> None:
    for cls in every_error_class():
        assert getattr(torchwork, cls.__name__) is cls
        assert cls.__name__ in torchwork.__all__


def test_old_import_paths_still_work() -> None:
    from torchwork.distributed.setup import DistributedError
    from torchwork.runs.checkpoint import NonFiniteWeightsError

    assert DistributedError is errors.DistributedError
    assert NonFiniteWeightsError is errors.NonFiniteWeightsError


def test_py_typed_is_shipped() -> None:
    assert (SRC / "torchwork" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in config["torchwork"]
