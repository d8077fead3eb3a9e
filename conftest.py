"""Every Python block of README.md and docs/ runs as a test (Sybil), so the documentation cannot drift from
the code. Each page's blocks share one namespace, in order, and run in a fresh temporary directory, so they
may write files. A block that must not run (a fragment that needs a GPU, say) is preceded by
``<!-- skip: next -->``; say why beside it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser


def _enter_temporary_directory(namespace: dict) -> None:
    namespace["_docs_cwd"] = os.getcwd()
    namespace["_docs_tmp"] = tempfile.TemporaryDirectory(prefix="torchwork-docs-")
    os.chdir(namespace["_docs_tmp"].name)


def _leave_temporary_directory(namespace: dict) -> None:
    os.chdir(namespace["_docs_cwd"])
    namespace["_docs_tmp"].cleanup()


# Test modules are imported by their path (--import-mode=importlib), so two folders may each hold a
# test_options.py; the helper modules the tests share (deploy_helpers, serve_fixtures, ...) are imported by
# name, from their folder put on the path here.
for _folder in sorted({p.parent for p in (Path(__file__).parent / "tests").rglob("*.py")
                       if not p.name.startswith("test_") and "real" not in p.parts}):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

# The suite's own rules (tests/isolation.py, suite_budget.py, suite_order.py): every test leaves the process
# as it found it, the whole run holds to its time budget, and the order is random where it may be.
pytest_plugins = ["isolation", "suite_budget", "suite_order"]

pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["README.md", "docs/*.md", "docs/design/*.md"],
    excludes=["docs/_build/*"],
    setup=_enter_temporary_directory,
    teardown=_leave_temporary_directory,
).pytest()
