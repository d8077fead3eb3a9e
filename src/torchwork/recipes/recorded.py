"""What a resumed run recorded: a recipe continues with the decisions the run already made.

``torchwork resume RUN`` runs the recipe again with ``TORCHWORK_RESUME=RUN``. A recipe's costly or
timing-dependent steps before training (a baseline, a precision probe) must not run again and must not
decide differently: the first run put their results in its trainer config, which the run's
``manifest.json`` keeps. This reads them back as JSON data (never executed, never unpickled), and only when
the run was recorded with the same settings.

Example:
    >>> import json, os, pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (run / "manifest.json").write_text(json.dumps({"config": {"epochs": 3, "precision_chosen": "32"}}))
    >>> os.environ["TORCHWORK_RESUME"] = str(run)
    >>> recorded_config({"epochs": 3})["precision_chosen"]
    '32'
    >>> recorded_config({"epochs": 4}) is None       # other settings: measure again
    True
    >>> del os.environ["TORCHWORK_RESUME"]
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchwork.runs.folder_files import load_json, read_run_file
from torchwork.runs.readback import MAX_MANIFEST_BYTES


def resumed_run() -> Path | None:
    """The run folder being resumed (``TORCHWORK_RESUME``), or None."""
    folder = os.environ.get("TORCHWORK_RESUME")
    return Path(folder) if folder else None


def manifest_config(run: Path) -> dict[str, Any] | None:
    """The ``config`` ``run``'s manifest recorded (None when it recorded none); an OSError or ValueError when
    the manifest cannot be read: a regular file inside the run, of a manifest's size (a FIFO or a link to
    /dev/zero is refused)."""
    recorded = load_json(read_run_file(run, "manifest.json", MAX_MANIFEST_BYTES), run / "manifest.json")
    config = recorded.get("config") if isinstance(recorded, dict) else None
    return config if isinstance(config, dict) else None


def recorded_config(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config the resumed run recorded, when its settings equal ``settings``; else None (and why)."""
    run = resumed_run()
    if run is None:
        return None
    try:
        recorded = manifest_config(run)
    except (OSError, ValueError) as error:
        print(f"torchwork: cannot read what {run / 'manifest.json'} recorded ({error}); measuring again.",
              file=sys.stderr)
        return None
    if recorded is None:
        return None
    wanted = json.loads(json.dumps(dict(settings), default=str))  # tuples become lists, as in the manifest
    changed = sorted(k for k in wanted if recorded.get(k) != wanted[k])
    if changed:
        print(f"torchwork: {run} was recorded with other settings ({', '.join(changed)}); measuring again.",
              file=sys.stderr)
        return None
    return recorded


class Decisions:
    """What a run decided by measuring after its first ``fit`` started (a transformer's strategy and
    precision, the variant to deploy, the INT8 fallback margin), kept in ``RUN/decisions.json`` as each is
    made, and read back (as JSON data) when the run is resumed, so that a resumed run decides the same.

    Example:
        >>> import pathlib, tempfile
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> Decisions(run).get("strategy") is None
        True
        >>> Decisions(run).record("strategy", {"chosen": "full"})
        >>> Decisions(run).get("strategy")
        {'chosen': 'full'}
    """

    source = "recorded by the run being resumed"  # how a decision read back is said

    def __init__(self, run: Path) -> None:
        self.path = Path(run) / "decisions.json"

    def _read(self) -> dict[str, Any]:
        try:  # as the manifest: a regular file inside the run, bounded
            recorded = load_json(read_run_file(self.path.parent, self.path.name, MAX_MANIFEST_BYTES), self.path)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            print(f"torchwork: cannot read {self.path} ({error}); measuring again.", file=sys.stderr)
            return {}
        return recorded if isinstance(recorded, dict) else {}

    def get(self, name: str) -> Any:
        """The recorded decision ``name`` (None when the run has not made it)."""
        return self._read().get(name)

    def record(self, name: str, value: Any) -> None:
        from torchwork.files import write_json

        write_json(self.path, {**self._read(), name: value})
