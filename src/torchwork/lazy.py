"""Lazy package attributes: a name is imported from its module on first use (keeps start-up fast).

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
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, names: dict[str, str], namespace: dict[str, Any],
                    ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``; ``names`` maps a public name to its module.

    ``namespace`` is the package's ``globals()``: a name once imported is stored there. Pair it with
    ``if TYPE_CHECKING:`` imports of the same names so that type checkers see them.
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
