"""One entry point of ``doctor_precision.py`` measured in a process of its own, for a checkout whose pinned
packages differ from those the other entries import in the benchmark's process (LLaMA-Factory 0.9.5 pins
transformers <= 5.6, trl <= 0.24, datasets <= 4.0).

The benchmark starts it with the checkout first on ``PYTHONPATH``; it runs the same measurement as an
entry run in the benchmark's process (a warm-up, then plain, doctor and anomaly mode interleaved), so the
imports are paid once here as there, and writes the figures and the doctor's findings to ``OUT`` as JSON.
Run by the benchmark: ``python doctor_apart.py OUT REPEATS CWD SCRIPT [ARGS...]``, with the entry's own
packages (``Entry.user_code``) in ``DOCTOR_USER_CODE``, joined by ``os.pathsep``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def main() -> None:
    out, repeats, cwd, script, *args = sys.argv[1:]
    torch.set_num_threads(1)
    from doctor_precision import USER_CODE, overhead

    USER_CODE[:] = [Path(place) for place in os.environ.get("DOCTOR_USER_CODE", "").split(os.pathsep) if place]
    cost = overhead(Path(script), args, Path(cwd), int(repeats))
    cost["result"] = cost["result"].to_json()
    Path(out).write_text(json.dumps(cost), encoding="utf-8")


if __name__ == "__main__":
    main()
