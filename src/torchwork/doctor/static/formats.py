"""A static scan written out: text for people, JSON, SARIF 2.1.0 (GitHub code scanning and other viewers)
and GitHub Actions workflow commands (``::error file=...,line=...::``: annotations on the pull request).

Example:
    >>> from torchwork.doctor.static.results import StaticFinding, StaticScan
    >>> scan = StaticScan([StaticFinding("missing-zero-grad", "error", "train.py", 9, 5, "No zero_grad.", "Add it.")],
    ...                   files=1, skipped=[])
    >>> print(github(scan))
    ::error file=train.py,line=9,col=5,title=torchwork doctor [missing-zero-grad]::No zero_grad. Fix: Add it.
"""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

from torchwork.doctor.static.results import Rule, StaticScan

FORMATS = ("text", "json", "sarif", "github")
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
_GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


def text(scan: StaticScan) -> str:
    lines = []
    for f in scan.findings:
        lines.append(f"{f.where}: {f.severity} [{f.id}] {f.message}")
        lines.append(f"    fix: {f.fix}")
        if f.confirm:
            lines.append(f"    run `{f.confirm}` to confirm (the runtime doctor has the same check)")
    for file, reason in scan.skipped:
        lines.append(f"{file}: skipped ({reason})")
    counts = {s: sum(f.severity == s for f in scan.findings) for s in ("error", "warning", "info")}
    summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "no finding"
    ignored = f"; {scan.ignored} ignored by comments" if scan.ignored else ""
    lines.append(f"torchwork doctor --static: {scan.files} file{'s' if scan.files != 1 else ''} scanned, "
                 f"{summary}{ignored}")
    return "\n".join(lines)


def as_json(scan: StaticScan) -> str:
    return json.dumps(scan.to_dict(), indent=2)


def _version() -> str:
    """torchwork's installed version (read from its metadata: the package's __init__ is a layer above)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchwork")
    except PackageNotFoundError:
        return "unknown"


def _uri(path: str) -> str:
    pure = PurePath(path)
    return pure.as_uri() if pure.is_absolute() else pure.as_posix()


def sarif(scan: StaticScan, rules: tuple[Rule, ...]) -> dict[str, Any]:
    """The scan as one SARIF 2.1.0 log: one run, the rules in ``tool.driver.rules``, a result per finding."""
    index = {rule.id: i for i, rule in enumerate(rules)}
    driver = {
        "name": "torchwork doctor --static", "version": _version(),
        "rules": [{"id": r.id, "name": r.id, "shortDescription": {"text": r.title},
                   "defaultConfiguration": {"level": _SARIF_LEVELS[r.severity]}} for r in rules],
    }
    results = [{
        "ruleId": f.id, "ruleIndex": index[f.id], "level": _SARIF_LEVELS[f.severity],
        "message": {"text": f"{f.message} Fix: {f.fix}"
                    + (f" Run `{f.confirm}` to confirm." if f.confirm else "")},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(f.file)},
                                            "region": {"startLine": f.line, "startColumn": f.column}}}],
    } for f in scan.findings if f.id in index]
    notifications = [{"level": "warning", "message": {"text": f"{file}: skipped ({reason})"}}
                     for file, reason in scan.skipped]
    invocation = {"executionSuccessful": True, "toolExecutionNotifications": notifications}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0",
            "runs": [{"tool": {"driver": driver}, "results": results, "invocations": [invocation]}]}


def _escape(value: str, property_value: bool = False) -> str:
    """GitHub's workflow-command escaping (the runner's unescaping reads it back): % CR LF in the message,
    and ``:`` ``,`` too inside a property."""
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if property_value else value


def github(scan: StaticScan) -> str:
    """One ``::error``/``::warning``/``::notice`` workflow command per finding."""
    lines = []
    for f in scan.findings:
        properties = ",".join([f"file={_escape(f.file, True)}", f"line={f.line}", f"col={f.column}",
                               f"title={_escape(f'torchwork doctor [{f.id}]', True)}"])
        message = f"{f.message} Fix: {f.fix}" + (f" Run `{f.confirm}` to confirm." if f.confirm else "")
        lines.append(f"::{_GITHUB_LEVELS[f.severity]} {properties}::{_escape(message)}")
    return "\n".join(lines)
