"""What the data report says about a data set: findings, each with a kind, a severity, a count, up to five
examples with their row numbers, and the fix; and the rows and classes of each split.

The JSON form (``data_report.json`` in a run folder) is ``{"findings": [{"kind", "severity", "count",
"examples", "fix", "summary"}], "splits": {...}, "source": {...}}``.

Example:
    >>> from torchwork.data.findings import DataReport, Finding
    >>> report = DataReport([Finding("empty-text", "warning", 1, [{"row": 3, "text": ""}], "drop the row",
    ...                              "1 row has no text")])
    >>> report.errors, report.to_dict()["findings"][0]["kind"]
    ([], 'empty-text')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

SEVERITIES = ("error", "warning", "info")
MAX_EXAMPLES = 5
MAX_ROWS = 100_000
EXAMPLE_CHARS = 160


def clip(text: str, chars: int = EXAMPLE_CHARS) -> str:
    """``text`` cut to ``chars`` characters (an ellipsis says it was cut), for an example in a report.

    Example:
        >>> clip("abcdef", 4)
        'abc…'
    """
    return text if len(text) <= chars else text[: chars - 1] + "…"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing the report found: ``count`` rows (or groups, as ``summary`` says) of ``kind``."""

    kind: str
    severity: str
    count: int
    examples: list[dict[str, Any]]
    fix: str
    summary: str
    rows: list[int | str] = dataclasses.field(default_factory=list)  # every row it concerns, for a script

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {SEVERITIES}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for a terminal: severity, kind, count and the summary."""
        return f"{self.severity:<7} {self.kind:<22} {self.count:>7,}  {self.summary}"


@dataclasses.dataclass
class DataReport:
    """The findings, the rows and classes of each split, and where the data came from."""

    findings: list[Finding]
    splits: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    source: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def of_kind(self, kind: str) -> Finding | None:
        """The finding of ``kind``, or None when there is none."""
        return next((f for f in self.findings if f.kind == kind), None)

    def counts(self) -> dict[str, int]:
        """``{kind: count}``: what a run's manifest records, so that ``runs diff`` shows a data change."""
        return {f.kind: f.count for f in self.findings}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "findings": [f.to_dict() for f in self.findings], "splits": self.splits}

    def lines(self, examples: int = 2) -> list[str]:
        """The report for a terminal or a log: a line per finding with its first examples and fix, then
        the class counts of each split."""
        out = [f"data report: {len(self.errors)} error(s), {len(self.findings)} finding(s)"]
        for finding in sorted(self.findings, key=lambda f: SEVERITIES.index(f.severity)):
            out.append(finding.line())
            for example in [e for e in finding.examples if "row" in e][:examples]:  # class counts have none
                text = clip(str(example.get("text", "")), 90)
                out.append(f"          row {example.get('row')}: {text!r} {example.get('note', '')}".rstrip())
            out.append(f"          fix: {finding.fix}")
        for name, split in self.splits.items():
            classes = ", ".join(f"{k} {v:,}" for k, v in split.get("classes", {}).items())
            out.append(f"split {name}: {split.get('rows', 0):,} rows ({classes})")
        return out


def example(row: int | str, text: str, **extra: Any) -> dict[str, Any]:
    """One example of a finding: the row (its number, or ``file:number`` in a second file), the text
    (clipped) and what else says why."""
    return {"row": row, "text": clip(text), **extra}


def finding(kind: str, severity: str, count: int, examples: Sequence[dict[str, Any]], fix: str,
            summary: str, rows: Sequence[int | str] = ()) -> Finding:
    """A :class:`Finding` with at most :data:`MAX_EXAMPLES` examples and at most :data:`MAX_ROWS` rows."""
    return Finding(kind, severity, int(count), list(examples)[:MAX_EXAMPLES], fix, summary, list(rows)[:MAX_ROWS])
