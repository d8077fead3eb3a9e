"""Which run each ``fit`` of a process continues when ``torchwork resume`` starts a script again.

A script may train more than once (pretrain, then fine-tune; the quickstart's n-gram model, then its
transformer), each time in a run folder of its own, the later ones often nested in the first one's folder.
``TORCHWORK_RESUME`` names the outermost run. Every run records its place in the process that made it,
``"lineage": {"outermost": NAME, "index": k}`` in its manifest: the k-th ``fit`` with a ``run_dir`` of a
process whose first run was NAME. Resuming, the first ``fit`` continues the named run and the k-th one the
run under its own ``run_dir`` whose lineage says it was the k-th of that run (a new run when there is none:
it had not started when the process was stopped).

``TORCHWORK_RESUME`` may also name a later fit's run (the one a kill or a Ctrl-C interrupted, which the
interrupt's message names): its lineage leads to the outermost run, recorded as ``"path"``, the outermost
run's folder relative to its own (a nested run also finds it among its parent folders), and every fit
resumes its own run as above. A fit without a ``run_dir`` keeps no checkpoint and no lineage: it trains
again from its start (exactly, when the script seeds it) and never takes a run from ``TORCHWORK_RESUME``.

Example:
    >>> import json, os, tempfile, pathlib
    >>> from torchwork.runs import lineage
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> outer, inner = root / "20260101T000000Z-aaaaaa", root / "20260101T000000Z-aaaaaa" / "t" / "20260101T000100Z-bbbbbb"
    >>> for run, index in ((outer, 0), (inner, 1)):
    ...     (run / "checkpoints").mkdir(parents=True)
    ...     _ = (run / "manifest.json").write_text(json.dumps({"lineage": {"outermost": outer.name, "index": index}}))
    >>> os.environ["TORCHWORK_RESUME"] = str(outer)
    >>> lineage.resume_target(None, root) == outer            # the first fit: the outermost run
    True
    >>> lineage.register(outer)
    {'outermost': '20260101T000000Z-aaaaaa', 'index': 0}
    >>> lineage.resume_target("latest", outer / "t") == inner  # the second: its own nested run
    True
    >>> del os.environ["TORCHWORK_RESUME"]; lineage.forget()
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torchwork.errors import CheckpointError, ConfigError
from torchwork.runs.folder import is_run_folder, list_runs

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
    from torchwork.runs.readback import load_manifest_file

    try:  # a regular file of bounded size: a link to a device or a FIFO is no manifest
        recorded = load_manifest_file(run / "manifest.json").get("lineage")
    except (OSError, ConfigError):
        return None
    return recorded if isinstance(recorded, dict) else None


def resume_target(resume: Any, run_dir: str | os.PathLike[str] | None) -> Any:
    """What the next ``fit`` resumes: ``resume`` itself unless ``TORCHWORK_RESUME`` is set; then the outermost
    run for the process's first fit with a ``run_dir``, the run of the same place for a later one (None: a
    new run). A fit without a ``run_dir`` has no run of its own: it gets ``resume`` as given."""
    named = os.environ.get(ENV)
    if not named or run_dir is None:
        return resume
    runs = _runs()
    if not runs:
        return outermost_of(Path(named))
    wanted = (runs[0].name, len(runs))
    if _place(Path(named)) == wanted:  # the run TORCHWORK_RESUME names is this fit's own
        return Path(named)
    for run in reversed(list_runs(run_dir)):
        if _place(run) == wanted:
            return run
    return None


def _place(run: Path) -> tuple[Any, Any] | None:
    recorded = lineage_of(run)
    return (recorded.get("outermost"), recorded.get("index")) if recorded is not None else None


def outermost_of(run: Path) -> Path:
    """The run of the first fit of the process that made ``run``: ``run`` itself, unless its lineage says it
    was a later fit; then the folder its lineage points to (``path``, or a parent folder of that name).

    Example:
        >>> import pathlib, tempfile
        >>> outermost_of(pathlib.Path(tempfile.mkdtemp())).is_dir()  # no lineage: the run itself
        True
    """
    recorded = lineage_of(run)
    if recorded is None or not recorded.get("index"):
        return run
    name, index = recorded.get("outermost"), recorded.get("index")
    places = []
    if isinstance(recorded.get("path"), str):
        places.append(Path(os.path.normpath(Path(os.path.abspath(run)) / recorded["path"])))
    places += [parent for parent in Path(os.path.abspath(run)).parents if parent.name == name]
    for place in places:
        if place.name == name and is_run_folder(place) and _place(place) in ((name, 0), None):
            return place
    raise CheckpointError(f"{run} is the run of training {index + 1} of its script, whose first training's run "
                          f"{name!r} is not where it was ({', '.join(map(str, places[:1])) or 'no path recorded'}; "
                          "nor among the run's parent folders): each training resumes its own run, so the first "
                          "one's folder is needed too. Put it back beside this run, or resume it by name.")


def register(run: Path) -> dict[str, Any]:
    """Count ``run`` as this process's next fit; returns its lineage (what its manifest records): a later fit's
    also records the first fit's run folder relative to its own, to find it from either."""
    runs = _runs()
    runs.append(run)
    recorded: dict[str, Any] = {"outermost": runs[0].name, "index": len(runs) - 1}
    if len(runs) > 1:
        recorded["path"] = os.path.relpath(os.path.abspath(runs[0]), os.path.abspath(run))
    return recorded


def resumed_run(run_dir: str | os.PathLike[str] | None) -> Path | None:
    """The run folder the next ``fit`` under ``run_dir`` would continue while resuming, if it exists: where a
    recipe reads back what that run decided before it trains again."""
    target = resume_target(None, run_dir)
    return Path(target) if target is not None and Path(target).is_dir() else None
