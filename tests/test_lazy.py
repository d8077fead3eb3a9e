"""torchwork/lazy.py: each package's public names are read back from its ``if TYPE_CHECKING:`` imports, by a
regular expression that must agree with Python's own parser on every package of torchwork."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import torchwork
from torchwork.lazy import type_checking_imports

SRC = Path(torchwork.__file__).parent


def parsed(path: Path) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    names.update({alias.asname or alias.name: statement.module for alias in statement.names})
    return names


@pytest.mark.parametrize("init", sorted(SRC.rglob("__init__.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_the_reading_agrees_with_the_parser(init: Path) -> None:
    assert type_checking_imports(str(init)) == parsed(init)


def test_every_import_form_is_read(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:  # pragma: no cover\n"
                    "    from torchwork.a import B, c as d  # noqa: F401\n"
                    "    from torchwork.e.f import (  # noqa: F401\n        G,\n        H as I,\n    )\n\n"
                    "    from torchwork.j import K\nelse:\n    from torchwork.x import Y\nZ = 1\n")
    assert type_checking_imports(str(init)) == parsed(init) == {
        "B": "torchwork.a", "d": "torchwork.a", "G": "torchwork.e.f", "I": "torchwork.e.f", "K": "torchwork.j"}


def test_lazy_package_gives_a_face_its_names_and_imports_each_on_first_use(tmp_path: Path) -> None:
    from torchwork.lazy import lazy_attributes, lazy_package

    init = tmp_path / "__init__.py"
    init.write_text("if TYPE_CHECKING:\n    from torchwork.lazy import lazy_attributes  # noqa: F401\n")
    namespace: dict = {"__name__": "pkg"}
    assert lazy_package(str(init), namespace) == ["lazy_attributes"]
    assert namespace["_LAZY"] == {"lazy_attributes": "torchwork.lazy"}
    assert namespace["__getattr__"]("lazy_attributes") is lazy_attributes is namespace["lazy_attributes"]
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'other'"):
        namespace["__getattr__"]("other")
