"""Lazy package attributes: a name is imported from its module on first use (keeps start-up fast).

A package writes each public name once, as an import under ``if TYPE_CHECKING:`` (what type checkers and IDEs
read); :func:`type_checking_imports` reads that block back as the table of which module defines which name, and
:func:`lazy_package` makes the package face lazy in one line after it: ``__all__ = lazy_package(__file__,
globals())``.

Example:
    >>> from torchwork.lazy import lazy_attributes
    >>> getattr_, dir_ = lazy_attributes("pkg", {"dumps": "json"}, {})
    >>> getattr_("dumps").__name__
    'dumps'
    >>> dir_()
    ['dumps']
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, names: dict[str, str], namespace: dict[str, Any],
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``names`` maps a public name to its module.

    ``namespace`` is the package's ``globals()``: a name once imported is stored there. ``names`` comes from
    the package's ``if TYPE_CHECKING:`` imports (:func:`type_checking_imports`), so that type checkers see the
    same names.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})  # what the module holds already and what it can import

    return __getattr__, __dir__


def lazy_package(init_file: str, namespace: dict[str, Any]) -> list[str]:
    """Make the package whose ``__init__`` is ``init_file`` (with ``globals()`` ``namespace``) lazy: its names
    are those of its ``if TYPE_CHECKING:`` imports (kept as ``_LAZY``: name -> module), each imported on first
    use by the ``__getattr__`` and ``__dir__`` put in ``namespace``; returns them, the package's ``__all__``.

    Type checkers read the imports and not this call, so they flag a misspelt name where a module
    ``__getattr__`` they could see would hide it.

    >>> import torchwork.serve
    >>> torchwork.serve._LAZY["create_app"], "create_app" in torchwork.serve.__all__
    ('torchwork.serve.app', True)
    """
    names = type_checking_imports(init_file)
    namespace["_LAZY"] = names
    namespace["__getattr__"], namespace["__dir__"] = lazy_attributes(namespace["__name__"], names, namespace)
    return list(names)


def type_checking_imports(init_file: str) -> dict[str, str]:
    """``{name: module}`` of the ``from module import name`` lines under ``if TYPE_CHECKING:`` in a file.

    Read with a regular expression, not ``ast``: importing and running the parser would add about 10 ms to
    every ``import torchwork`` (tests/test_lazy.py holds the two readings equal on every package).

    >>> import torchwork
    >>> type_checking_imports(torchwork.__file__)["Trainer"]
    'torchwork.engine.trainer'
    """
    with open(init_file, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    start = next((i for i, line in enumerate(lines) if re.match(r"if TYPE_CHECKING:", line)), len(lines))
    block: list[str] = []
    for line in lines[start + 1:]:
        if line.strip() and not line[0].isspace():
            break  # the end of the indented block
        block.append(line.split("#", 1)[0])
    names: dict[str, str] = {}
    for found in re.finditer(r"^\s+from\s+(torchwork[\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)", "\n".join(block), re.M):
        for alias in found.group(2).strip("()").split(","):
            parts = alias.split()
            if parts:
                names[parts[-1]] = found.group(1)  # "X" or "X as Y": the name bound is the last word
    return names
