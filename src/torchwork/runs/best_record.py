"""What ``checkpoints/best.json`` says of a run's best checkpoint, read as data.

The trainer writes it atomically each time the monitored value improves. A resumed run that never improves
keeps the one the folder already held, so the recipes read it like any file of a run folder: a regular file
inside the run, at most :data:`MAX_BEST_BYTES`, each field checked.

Example:
    >>> import json, pathlib, tempfile
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> (run / "checkpoints").mkdir()
    >>> _ = (run / "checkpoints" / "best.json").write_text(json.dumps(
    ...     {"monitor": "val_loss", "mode": "min", "value": 0.25, "step": 40, "from": "step-000040.pt"}))
    >>> record = read_best_record(run)
    >>> record["value"], record["step"]
    (0.25, 40)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torchwork.errors import CheckpointError, ConfigError
from torchwork.finite import is_finite_number
from torchwork.runs.folder_files import load_json, read_run_file

BEST_RECORD = Path("checkpoints", "best.json")
MAX_BEST_BYTES = 2**20  # a few fields


def read_best_record(run: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"monitor", "mode", "value", "step", "from"}`` of the run's best checkpoint: ``value`` a finite
    number, ``step`` a count. A CheckpointError naming the file when it is missing, not a regular file of the
    run, too large, not JSON, or its value or step is not one."""
    where = Path(run) / BEST_RECORD
    try:
        record = load_json(read_run_file(run, BEST_RECORD, MAX_BEST_BYTES), where)
    except FileNotFoundError:
        raise CheckpointError(f"{where} is missing: the run recorded no best checkpoint (did it finish an "
                              "epoch?). Train again, or resume it.") from None
    except (ConfigError, OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"cannot read the run's best checkpoint record: {error}".rstrip(".") + ". "
                              "Remove the run folder and train again.") from None
    problem = _field_problem(record)
    if problem:
        raise CheckpointError(f"{where}: {problem}; it was not written by torchwork. Remove the run folder and "
                              "train again.")
    return record


def _field_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"expected an object of fields, found {type(record).__name__}"
    value, step = record.get("value"), record.get("step")
    if not is_finite_number(value):
        return "'value' is not a finite number"
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63:
        return "'step' is not a count (an integer >= 0)"
    return None
