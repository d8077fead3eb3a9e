"""docs/architecture.md's map of src/torchwork matches the code: every package and module, each with the first
sentence of its docstring, written by docs/tools/architecture_map.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("architecture_map_tool", ROOT / "docs" / "tools" / "architecture_map.py")
assert _spec is not None and _spec.loader is not None
architecture_map = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = architecture_map
_spec.loader.exec_module(architecture_map)


def test_the_map_matches_the_code() -> None:
    page = architecture_map.PAGE.read_text()
    found = architecture_map.differences(page)
    assert not found, ("docs/architecture.md's map of src/torchwork differs from the code:\n"
                       + "\n".join(architecture_map.module_changes(page) or ["  the lines' layout"])
                       + "\nRun: python docs/tools/architecture_map.py (it rewrites the map; then commit the page)")


def test_a_new_module_is_a_difference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "torchwork"
    (package / "engine").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "engine" / "__init__.py").write_text('"""The loop."""\n')
    (package / "engine" / "step.py").write_text('"""One step. More."""\n')
    monkeypatch.setattr(architecture_map, "SRC", package)
    page = architecture_map.page_with_map(f"# Map\n{architecture_map.BEGIN}\n{architecture_map.END}\n")
    assert "    └── step.py            One step." in page
    (package / "engine" / "loop.py").write_text('"""The loop: epochs."""\n')
    assert architecture_map.module_changes(page) == ["  add under src/torchwork/engine/: loop.py  The loop: epochs."]
    assert architecture_map.differences(page) == [
        "--- docs/architecture.md (committed)", "+++ docs/architecture.md (from the code)", "@@ -6,0 +7 @@",
        "+    ├── loop.py            The loop: epochs."]
