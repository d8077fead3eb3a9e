"""A recipe's settings as a table: name, type, default and what it does, read from the config dataclass
and the comments beside (or above) each field, so the table cannot drift from the code.

``python -m torchwork.recipes.settings sentiment`` prints it (the docs' recipes page shows that output).

Example:
    >>> rows = settings_rows("sentiment")
    >>> ("epochs", "int", "12") == rows[[r[0] for r in rows].index("epochs")][:3]
    True
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import io
import sys
import tokenize
from typing import Any


def _comments(config_class: type) -> dict[str, str]:
    """Field name -> its comment: the one on its line, else the comment lines just above it."""
    source = inspect.getsource(config_class)
    found: dict[str, str] = {}
    pending: list[str] = []
    line_of_field: dict[int, str] = {}
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        name = stripped.split(":", 1)[0]
        if line.startswith("    ") and not line.startswith("     ") and ":" in stripped and name.isidentifier():
            line_of_field[number] = name
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            row = token.start[0]
            if row in line_of_field:
                found[line_of_field[row]] = text
            else:
                pending.append(text)
                following = row + 1
                if following in line_of_field:
                    found.setdefault(line_of_field[following], " ".join(pending))
                    pending = []
    return found


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def settings_rows(recipe: str) -> list[tuple[str, str, str, str]]:
    """``(name, type, default, description)`` for every setting of ``recipe``, in the dataclass's order."""
    from torchwork.recipes.registry import RECIPES

    if recipe not in RECIPES:
        from torchwork.errors import ConfigError

        raise ConfigError(f"unknown recipe {recipe!r}; recipes: {', '.join(RECIPES)}.")
    module, class_name = RECIPES[recipe]
    config_class = getattr(importlib.import_module(module), class_name)
    notes = _comments(config_class)
    return [(f.name, str(f.type), _default(f), notes.get(f.name, "")) for f in dataclasses.fields(config_class)]


def settings_table(recipe: str) -> str:
    """The settings of ``recipe`` as aligned text, one setting a line."""
    rows = [("setting", "type", "default", "what it does"), *settings_rows(recipe)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"{n:<{widths[0]}}  {t:<{widths[1]}}  {d:<{widths[2]}}  {what}".rstrip()
                     for n, t, d, what in rows)


def main(argv: list[str] | None = None) -> int:
    """Print the settings of each recipe named (every recipe without a name); an unknown name: one line on
    stderr and exit code 2, as the ``torchwork`` command says it, before anything is printed.

    Example:
        >>> main(["bogus"])
        2
    """
    names = argv if argv is not None else sys.argv[1:]
    from torchwork.errors import ConfigError
    from torchwork.recipes.registry import RECIPES

    try:
        tables = [settings_table(recipe) for recipe in names or list(RECIPES)]
    except ConfigError as error:
        print(f"torchwork: error: {error}", file=sys.stderr)
        return 2
    for i, (recipe, table) in enumerate(zip(names or list(RECIPES), tables)):
        print(("\n" if i else "") + f"{recipe}:\n{table}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
