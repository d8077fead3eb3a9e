"""What a static rule reports (a :class:`Hit` at a node) and what the scan returns (a :class:`StaticFinding`
at a file's line), with the rule table's own entries (:class:`Rule`).

Example:
    >>> f = StaticFinding("missing-zero-grad", "error", "train.py", 12, 9, "optimizer.step() ...", "Call ...",
    ...                   confirm="torchwork doctor train.py")
    >>> f.where, f.to_dict()["confirm"]
    ('train.py:12:9', 'torchwork doctor train.py')
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from torchwork.doctor.static.syntax import FileIndex


@dataclasses.dataclass(frozen=True)
class Hit:
    """A rule's verdict on one node: the node's line is the finding's line."""

    node: ast.AST
    severity: str
    message: str
    fix: str


@dataclasses.dataclass(frozen=True)
class Rule:
    """One static rule: the check id (the runtime check's id where both mean the same mistake), its title,
    the most severe level it reports, the function that reads a file, and whether it reads test files
    (``tests/``, ``test_*.py``: where deliberate misuse lives) too."""

    id: str
    title: str
    severity: str
    find: Callable[[FileIndex, str], Iterator[Hit]]  # (the file's index, its path as shown) -> hits
    in_tests: bool = True


@dataclasses.dataclass(frozen=True)
class StaticFinding:
    """One mistake found in the source: where (1-based line and column), what, the fix, and, when the
    runtime doctor has the same check, the command that confirms it by running the script."""

    id: str
    severity: str
    file: str
    line: int
    column: int
    message: str
    fix: str
    confirm: str | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class StaticScan:
    """A whole scan: the findings (ignored ones left out), how many files were read, the files skipped and
    why, and how many findings ``# torchwork: ignore[...]`` comments silenced."""

    findings: list[StaticFinding]
    files: int
    skipped: list[tuple[str, str]]
    ignored: int = 0

    @property
    def exit_code(self) -> int:
        """1 when a finding is an error (a CI build fails), else 0."""
        return 1 if any(f.severity == "error" for f in self.findings) else 0

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [f.to_dict() for f in self.findings], "files": self.files,
                "skipped": [{"file": file, "reason": reason} for file, reason in self.skipped],
                "ignored": self.ignored, "exit": self.exit_code}
