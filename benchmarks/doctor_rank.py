"""One rank of a torchrun entry point of ``doctor_precision.py``: run the script plain, under the doctor or
under anomaly mode, and write what it took (and the doctor's findings) to ``OUT/rank<RANK>.json``.

The examples check for GPUs through ``torch.accelerator``; on a machine without one, this runner makes
``torch.accelerator`` report the CPU (as many devices as ranks) so that they run on the CPU with gloo, their
code unchanged. Run by the benchmark: ``torchrun --nproc-per-node 2 doctor_rank.py HOW OUT SCRIPT [ARGS...]``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def cpu_as_accelerator() -> None:
    if torch.accelerator.is_available():
        return
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    torch.accelerator.current_accelerator = lambda *args, **kwargs: torch.device("cpu")  # type: ignore[assignment]
    torch.accelerator.is_available = lambda: True  # type: ignore[assignment]
    torch.accelerator.device_count = lambda: ranks  # type: ignore[assignment]


def main() -> None:
    how, out, script, *args = sys.argv[1:]
    cpu_as_accelerator()
    torch.set_num_threads(1)
    from doctor_precision import run_once

    seconds, value = run_once(how, Path(script), args, Path.cwd())
    payload = {"seconds": list(seconds), "result": value.to_json() if how == "doctor" else {"exit": value}}
    Path(out, f"rank{os.environ.get('RANK', '0')}.json").write_text(json.dumps(payload), encoding="utf-8")


if __name__ == "__main__":
    main()
