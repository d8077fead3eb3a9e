"""The documentation cannot lie: the README stays a short map, every console excerpt is produced by the
command it shows (``make docs-output``), and the excerpts that do not depend on the machine are rerun here
and must match. (The Python blocks of README.md and docs/ run through Sybil: the repository's conftest.py.)
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docs_output_tool", ROOT / "docs" / "tools" / "docs_output.py")
assert _spec and _spec.loader
docs_output = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = docs_output  # dataclasses look their module up while the class is made
_spec.loader.exec_module(docs_output)

CONSOLE_BLOCK = re.compile(r"^```console$", re.MULTILINE)


def _pages() -> list[Path]:
    return docs_output.documents()


def test_the_readme_is_a_short_map() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert not re.search(r"\bissues? \d+|#\d{2}\b", text), "no issue numbers in the README"
    assert "/work/" not in text and "../shared" not in text, "no machine paths or links outside the repository"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_console_excerpt_names_the_command_that_made_it(page: Path) -> None:
    text = page.read_text()
    consoles = len(CONSOLE_BLOCK.findall(text))
    marked = docs_output.markers_in(text)
    assert len(marked) == consoles, (f"{page.name}: {consoles - len(marked)} console block(s) without an "
                                     "<!-- output ... --> marker (see docs/tools/docs_output.py)")
    for match, marker in marked:
        assert match["excerpt"].strip(), f"{page.name}: an empty excerpt for {marker}; run make docs-output"


def test_the_pages_name_no_machine_paths() -> None:
    for page in _pages():
        text = page.read_text()
        assert "/work/main" not in text and "../shared" not in text, page


def _exact_excerpts() -> list[tuple[Path, int]]:
    return [(page, i) for page in _pages()
            for i, (_, marker) in enumerate(docs_output.markers_in(page.read_text())) if marker.exact]


@pytest.mark.slow
@pytest.mark.parametrize("page,index", _exact_excerpts(),
                         ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else str(v))
def test_exact_excerpts_are_current(page: Path, index: int) -> None:
    text = page.read_text()
    match, marker = docs_output.markers_in(text)[index]
    fresh = docs_output.excerpt_for(marker, text[:match.start()])
    assert fresh == match["excerpt"], (f"{page.name}: the excerpt of {marker.commands or marker.source} is "
                                       f"stale; run `make docs-output` and commit the diff.\nnow:\n{fresh}")


def test_a_marker_with_an_unknown_key_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown key 'comand'"):
        docs_output.parse_marker("<!-- output\ncomand: echo hi\n-->")


def test_every_folder_the_pages_serve_is_one_an_export_on_them_writes() -> None:
    """A reader copies the export line, then the serve line: the serve line must name the folder written."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        written = set(re.findall(r"torchwork (?:export|fit|quickstart)[^\n]*?(?:-o|--output) (\S+)", text))
        for served in re.findall(r"^torchwork serve (/tmp/\S+|artifacts/\S+)", text, flags=re.M):
            assert served in written, f"{page.name}: 'torchwork serve {served}' serves a folder no export there writes"
