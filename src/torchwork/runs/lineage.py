"""Which run each ``fit`` of a process continues when ``torchwork resume`` starts a script again.

A script may train more than once (pretrain, then fine-tune; the quickstart's n-gram model, then its
transformer), each time in a run folder of its own, the later ones often nested in the first one's folder.
``TORCHWORK_RESUME`` names the outermost run. Every run records its place in the process that made it,
``"lineage": {"outermost": NAME, "index": k}`` in its manifest: the k-th ``fit`` with a ``run_dir`` of a
process whose first run was NAME. Resuming, the first ``fit`` continues the named run and the k-th one the
run under its own ``run_dir`` whose lineage says it was the k-th of that run (a new run when there is none:
it had not started when the process was stopped).

Example:
    >>> import json, os, tempfile, pathlib
    >>> from torchwork.runs import lineage
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> outer, inner = root / "20260101T000000Z-aaaaaa", root / "20260101T000000Z-aaaaaa" / "t" / "20260101T000100Z-bbbbbb"
    >>> for run, index in ((outer, 0), (inner, 1)):
    ...     (run / "checkpoints").mkdir(parents=True)
    ...     _ = (run / "manifest.json").write_text(json.dumps({"lineage": {"outermost": outer.name, "index": index}}))
    >>> os.environ["TORCHWORK_RESUME"] = str(outer)
    >>> lineage.resume_target(None, root) == str(outer)       # the first fit: the outermost run
    True
    >>> lineage.register(outer)
    {'outermost': '20260101T000000Z-aaaaaa', 'index': 0}
    >>> lineage.resume_target("latest", outer / "t") == inner  # the second: its own nested run
    True
    >>> del os.environ["TORCHWORK_RESUME"]; lineage.forget()
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torchwork.runs.folder import list_runs

ENV = "TORCHWORK_RESUME"

# The run folders this process's fits opened, in order, and the TORCHWORK_RESUME they were opened under.
_opened: dict[str, Any] = {"resume": None, "runs": []}


def _runs() -> list[Path]:
    resume = os.environ.get(ENV)
    if _opened["resume"] != resume:  # a new resume (tests set it in-process): count afresh
        _opened.update(resume=resume, runs=[])
    return _opened["runs"]


def forget() -> None:
    """Forget the runs this process opened (for tests)."""
    _opened.update(resume=None, runs=[])


def lineage_of(run: Path) -> dict[str, Any] | None:
    """The lineage a run folder's manifest records (None when it records none or cannot be read)."""
    try:
        recorded = json.loads((run / "manifest.json").read_text()).get("lineage")
    except (OSError, ValueError, AttributeError):
        return None
    return recorded if isinstance(recorded, dict) else None


def resume_target(resume: Any, run_dir: str | os.PathLike[str] | None) -> Any:
    """What the next ``fit`` resumes: ``resume`` itself unless ``TORCHWORK_RESUME`` is set; then the outermost
    run for the process's first fit, the nested run of the same place for a later one (None: a new run)."""
    named = os.environ.get(ENV)
    if not named:
        return resume
    runs = _runs()
    if not runs:
        return named
    if run_dir is None:
        return None
    wanted = {"outermost": runs[0].name, "index": len(runs)}
    for run in reversed(list_runs(run_dir)):
        if lineage_of(run) == wanted:
            return run
    return None


def register(run: Path) -> dict[str, Any]:
    """Count ``run`` as this process's next fit; returns its lineage (what its manifest records)."""
    runs = _runs()
    runs.append(run)
    return {"outermost": runs[0].name, "index": len(runs) - 1}


def resumed_run(run_dir: str | os.PathLike[str] | None) -> Path | None:
    """The run folder the next ``fit`` under ``run_dir`` would continue while resuming, if it exists: where a
    recipe reads back what that run decided before it trains again."""
    target = resume_target(None, run_dir)
    return Path(target) if target is not None and Path(target).is_dir() else None
