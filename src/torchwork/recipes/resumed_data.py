"""``torchwork resume`` of a ``fit`` run continues it only on the data it was started on.

A ``fit`` run records its data's fingerprint (``config.data_source`` in the run's ``manifest.json``: the
SHA-256 of the file, or of an image folder's listing and files). When ``torchwork resume RUN`` runs the
command again, the file is read again; if it changed meanwhile (edited, replaced, another export), the run
stops there, before the data report, the baseline or any training, with the two fingerprints and what to do:
restore the file to continue, or start a new run. The engine would refuse the changed splits too
(:func:`torchwork.runs.fingerprint.changed_splits`), but only after the costly steps before training, and a
recipe's recorded decisions (the baseline's scores) belong to the old data.

Example:
    >>> import json, os, pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> source = {"data": {"path": "reviews.csv", "fingerprint": "sha256:aaaa"}}
    >>> _ = (run / "manifest.json").write_text(json.dumps({"config": {"data_source": source}}))
    >>> os.environ["TORCHWORK_RESUME"] = str(run)
    >>> check_resumed_source({"data": {"path": "reviews.csv", "fingerprint": "sha256:aaaa"}})
    >>> check_resumed_source({"data": {"path": "reviews.csv", "fingerprint": "sha256:bbbb"}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.DataError: reviews.csv is not the data file the resumed run ... was started on (sha256:aaaa recorded, sha256:bbbb now): a run resumes only on its own data. Restore the file to continue the run, or start a new run: the same command without torchwork resume.
    >>> del os.environ["TORCHWORK_RESUME"]
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchwork.errors import DataError
from torchwork.recipes.recorded import manifest_config, resumed_run

# Where a fingerprint sits in a data source record: a text fit's data and test files, an image fit's folder.
_WHAT = {"data": "data file", "test": "test file", "": "image folder"}


def _fingerprints(source: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """``{part: (path, fingerprint)}`` of a data source record (text: ``data``/``test``; images: top level)."""
    found = {}
    for part in ("data", "test"):
        entry = source.get(part)
        if isinstance(entry, Mapping) and "fingerprint" in entry:
            found[part] = (str(entry.get("path")), entry["fingerprint"])
    if "fingerprint" in source:
        found[""] = (str(source.get("folder")), source["fingerprint"])
    return found


def _recorded_source(run: Path) -> Mapping[str, Any] | None:
    """The data source ``run`` recorded, or None (a run that recorded none)."""
    try:  # torchwork resume has checked it already; a damaged one is the engine's to refuse
        config = manifest_config(run)
    except (OSError, ValueError):
        return None
    source = config.get("data_source") if config is not None else None
    return source if isinstance(source, Mapping) else None


def check_resumed_source(current: Mapping[str, Any]) -> None:
    """Nothing when not resuming, or when ``current`` (this run's data source record) has the fingerprints
    the resumed run recorded; else a :class:`~torchwork.errors.DataError` naming the changed file."""
    run = resumed_run()
    recorded = _recorded_source(run) if run is not None else None
    if recorded is None:
        return
    before, now = _fingerprints(recorded), _fingerprints(current)
    if not before:
        return
    for part in sorted(set(before) | set(now)):
        if part in before and part in now and before[part][1] != now[part][1]:
            (_, old), (path, fingerprint) = before[part], now[part]
            problem = (f"{path} is not the {_WHAT[part]} the resumed run {run} was started on ({old} "
                       f"recorded, {fingerprint} now)")
        elif part not in now:
            problem = f"the resumed run {run} was started with the {_WHAT[part]} {before[part][0]}, " \
                      "and this command has none"
        elif part not in before:
            problem = f"the resumed run {run} was started without a {_WHAT[part]}, and this command " \
                      f"has {now[part][0]}"
        else:
            continue
        raise DataError(f"{problem}: a run resumes only on its own data. Restore the file to continue the run, "
                        "or start a new run: the same command without torchwork resume.")
