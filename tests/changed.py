"""The test paths that cover what changed, for ``make test-quick``: printed one per line.

What changed: the working tree's uncommitted changes and new files, or, on a clean tree, the last commit's.
A module of ``src/torchwork/PACKAGE/`` maps to ``tests/PACKAGE/`` and to its own doctests; a top-level module
``src/torchwork/NAME.py`` to ``tests/test_NAME*.py``; a test file to itself, a test helper to its folder (one
in tests/ itself to the top-level tests); a
page of the docs to itself. When nothing maps, the public API's and the layers' tests stand in.

Example:
    >>> sorted(paths_to_test(["src/torchwork/serve/app.py", "docs/serve.md", "tests/deploy/deploy_helpers.py"]))
    ['docs/serve.md', 'src/torchwork/serve/app.py', 'tests/deploy', 'tests/serve']
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FALLBACK = ["tests/test_public_api.py", "tests/layers"]


def changed_files() -> list[str]:
    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return [line for line in done.stdout.splitlines() if line]

    changed = git("diff", "--name-only", "HEAD") + git("ls-files", "--others", "--exclude-standard")
    return changed or git("diff", "--name-only", "HEAD~1", "HEAD")


def _paths_for(name: str) -> list[str]:
    parts = Path(name).parts
    if name.endswith(".md") and (parts[0] == "docs" or name == "README.md"):
        return [name]
    if parts[:2] == ("src", "torchwork") and name.endswith(".py"):
        if len(parts) == 3:
            return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob(f"test_{Path(name).stem}*.py"))]
        package = ROOT / "tests" / parts[2]
        return [name, *([str(package.relative_to(ROOT))] if package.is_dir() else [])]
    if parts[0] == "tests" and name.endswith(".py"):
        if Path(name).name.startswith("test_"):
            return [name]
        if len(parts) == 2:  # the suite's own helpers: the top-level tests, which test them
            return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))]
        return [str(Path(name).parent)]
    return []


def paths_to_test(names: list[str]) -> set[str]:
    """The test paths for these changed files (relative to the repository), existing ones only."""
    return {path for name in names for path in _paths_for(name) if (ROOT / path).exists()}


def main() -> int:
    paths = paths_to_test(changed_files()) or set(FALLBACK)
    print("\n".join(sorted(paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
