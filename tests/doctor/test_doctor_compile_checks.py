"""The doctor's torch.compile checks, on their examples (examples/mistakes/), run in one subprocess:

* ``recompiles``: a model compiled with dynamic=False and fed a longer sequence every step recompiles until
  Dynamo's recompile limit and then silently runs in eager (``recompiles.py``);
* ``graph-breaks``: a forward that branches on ``.item()`` breaks the graph on that line (``graph_breaks.py``);
* a compiled model with one batch shape and no Python on tensor values: nothing (``correct_compiled.py``).

test_doctor_examples.py checks that each gives exactly its marked findings; this file checks what they say.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "examples" / "mistakes" / f"{name}.py" for name in ("recompiles", "graph_breaks", "correct_compiled")]
DRIVER = """
import json, sys
from torchwork.doctor.runner import run_script
print(json.dumps({script: run_script(script, quiet_stdout=True).to_json() for script in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def findings() -> dict[str, list[dict]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", DRIVER, *map(str, SCRIPTS)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return {Path(k).stem: v["findings"] for k, v in json.loads(run.stdout.strip().splitlines()[-1]).items()}


@pytest.mark.slow
def test_recompiles_names_the_compile_call_the_limit_and_the_guard(findings):
    (found,) = findings["recompiles"]
    assert found["id"] == "recompiles" and found["line"] == 15  # the torch.compile(..., dynamic=False) line
    assert "compiled the model compiled here 8 times in 12 optimizer steps" in found["message"]
    assert "hit Dynamo's recompile limit and silently runs it in eager" in found["message"]
    assert "size mismatch at index 1" in found["message"] and "bucket" in found["fix"]


@pytest.mark.slow
def test_graph_breaks_names_the_users_item_line_not_the_doctors(findings):
    (found,) = findings["graph_breaks"]
    assert found["id"] == "graph-breaks" and found["line"] == 20 and found["file"].endswith("graph_breaks.py")
    assert "Tensor.item()" in found["message"] and "torch.where" in found["fix"]


@pytest.mark.slow
def test_a_correct_compiled_script_gets_nothing(findings):
    assert findings["correct_compiled"] == []
