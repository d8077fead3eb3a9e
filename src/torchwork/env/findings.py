"""Environment findings: a problem with this machine, how bad it is, and what to do.

The same shape as the doctor's findings (id, severity, message, fix) without the doctor's file:line,
which has no meaning for a machine: a tiny dataclass of env's own, so that env does not depend on the
doctor's internals.

Example:
    >>> from torchwork.env.findings import Finding, format_findings
    >>> print(format_findings([Finding("threads", "warning", "8 threads on 2 cores.", "Set OMP_NUM_THREADS=2.")]))
    WARNING [threads] 8 threads on 2 cores.
        fix: Set OMP_NUM_THREADS=2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem of the environment: a stable id, a severity (error, warning, info), what and the fix."""

    id: str
    severity: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (order.get(f.severity, len(order)), f.id))


def format_findings(findings: Iterable[Finding]) -> str:
    """Each finding as ``SEVERITY [id] message`` and an indented ``fix:`` line, errors first."""
    lines = []
    for finding in sort_findings(findings):
        lines.append(f"{finding.severity.upper()} [{finding.id}] {finding.message}")
        lines.append(f"    fix: {finding.fix}")
    return "\n".join(lines)
