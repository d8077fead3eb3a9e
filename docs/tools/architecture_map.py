"""Write the map of ``src/torchwork`` in docs/architecture.md from the code: one line per package and module,
its name and the first sentence of its docstring. ``python docs/tools/architecture_map.py`` rewrites the
map between its two markers; ``--check`` prints what differs and exits 1 (tests/docs/test_architecture_map.py
runs the same comparison).

A new module needs only its docstring: its first sentence is its entry in the map.

Example:
    >>> summary("'''Digits: a small classifier.\\n\\nMore text.'''")
    'Digits: a small classifier.'
    >>> summary("'''Plots (``report.html``) via :func:`curves_png`, e.g. this one. Second.'''")
    'Plots (`report.html`) via curves_png, e.g. this one.'
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "torchwork"
PAGE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- map: written by docs/tools/architecture_map.py from each module's docstring; do not edit by hand -->"
END = "<!-- end of map -->"
NAME_WIDTH = 26  # the column the summaries start in at least (a folder of longer names: one past its longest)
WIDTH = 118  # a line is cut (with " ...") past this many characters
# Folders of other files than Python, with what they hold.
OTHER_FOLDERS = {"deploy/cpp": "the C++ runner's sources (a CMake project), copied into an artifact by --cpp"}


def summary(source: str) -> str:
    """The first sentence of a module's docstring, on one line, its reST markup made plain."""
    docstring = ast.get_docstring(ast.parse(source)) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    sentence = re.match(r"(.+?\.)(?:\s+[A-Z(`*]|$)", paragraph)
    text = sentence.group(1) if sentence else paragraph
    text = re.sub(r":\w+:`~?\.?([^`]+)`", r"\1", text)  # :func:`name` -> name
    return text.replace("``", "`")


def _line(prefix: str, name: str, text: str, width: int = NAME_WIDTH) -> str:
    line = f"{prefix}{name}".ljust(width) + " " + text
    if len(line) > WIDTH:
        line = line[:WIDTH - 4].rsplit(" ", 1)[0] + " ..."
    return line.rstrip()


def _entries(folder: Path) -> list[tuple[str, Path]]:
    """(name shown, path) of a folder's modules first, then its subpackages and other folders, by name."""
    modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    folders = sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"
                     and ((p / "__init__.py").is_file() or p.relative_to(SRC).as_posix() in OTHER_FOLDERS))
    return [(p.name, p) for p in modules] + [(p.name + "/", p) for p in folders]


def tree_lines(folder: Path | None = None, indent: str = "") -> list[str]:
    """The map of ``folder`` (default: src/torchwork): each module with its summary; each package with its
    own, then its contents."""
    folder = SRC if folder is None else folder
    lines: list[str] = []
    entries = _entries(folder)
    width = max([NAME_WIDTH, *(len(indent) + 4 + len(name) for name, _ in entries)])
    for position, (name, path) in enumerate(entries):
        last = position == len(entries) - 1
        branch, below = ("└── ", "    ") if last else ("├── ", "│   ")
        if path.is_file():
            lines.append(_line(indent + branch, name, summary(path.read_text()), width))
        elif (path / "__init__.py").is_file():
            lines.append(_line(indent + branch, name, summary((path / "__init__.py").read_text()), width))
            lines.extend(tree_lines(path, indent + below))
        else:
            lines.append(_line(indent + branch, name, OTHER_FOLDERS[path.relative_to(SRC).as_posix()], width))
    return lines


def the_map() -> str:
    top = _line("", "src/torchwork/", summary((SRC / "__init__.py").read_text()))
    return "\n".join([BEGIN, "", "```text", top, *tree_lines(), "```", "", END])


def page_with_map(page: str) -> str:
    """``page`` with its map replaced by the one the code gives."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{PAGE}: no map markers; put these two lines where the map goes:\n{BEGIN}\n{END}")
    return page[:start] + the_map() + page[end + len(END):]


def differences(page: str) -> list[str]:
    """The lines to change in ``page``'s map, as a unified diff (empty when it matches the code)."""
    fresh = page_with_map(page)
    return list(difflib.unified_diff(page.splitlines(), fresh.splitlines(), "docs/architecture.md (committed)",
                                     "docs/architecture.md (from the code)", n=0, lineterm=""))


def entries_of(map_lines: list[str]) -> dict[str, str]:
    """``{path below src/torchwork: its line}`` of a map's tree lines (read back from their indentation)."""
    found: dict[str, str] = {}
    folders: list[str] = []
    for line in map_lines:
        branch = max(line.find("├── "), line.find("└── "))
        if branch < 0:
            continue
        depth, name = branch // 4, line[branch + 4:].split(" ", 1)[0]
        folders[depth:] = [name]
        found["".join(folders)] = line
    return found


def _text(line: str) -> str:
    """A map line's summary, its spacing and the cut (" ...") left out."""
    words = line[max(line.find("├── "), line.find("└── ")) + 4:].split()[1:]
    return " ".join(words[:-1] if words[-1:] == ["..."] else words)


def module_changes(page: str) -> list[str]:
    """What the map lacks and what it lists that the code no longer has, module by module, in words."""
    start, end = page.find(BEGIN), page.find(END)
    written = entries_of(page[start:end].splitlines()) if 0 <= start < end else {}
    fresh = entries_of(tree_lines())
    missing = [f"  add under src/torchwork/{path[:path.rstrip('/').rfind('/') + 1]}: "
               f"{path.rstrip('/').rsplit('/', 1)[-1]}{'/' if path.endswith('/') else ''}  {_text(fresh[path])}" for path in fresh if path not in written]
    gone = [f"  remove: {path}" for path in written if path not in fresh]
    changed = [f"  its summary changed: {path}: {_text(fresh[path])}" for path in fresh if path in written
               and not (_text(fresh[path]).startswith(_text(written[path]))
                        or _text(written[path]).startswith(_text(fresh[path])))]
    return missing + gone + changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="print the differences and exit 1; write nothing")
    args = parser.parse_args(argv)
    page = PAGE.read_text()
    if args.check:
        found = differences(page)
        print("\n".join(module_changes(page) + found) or "the map matches the code")
        return 1 if found else 0
    PAGE.write_text(page_with_map(page))
    return 0


if __name__ == "__main__":
    sys.exit(main())
