"""serve/heap.py: the server process settles its heap once the model is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

from serve_fixtures import SRC


def test_settle_heap_freezes_what_is_alive_and_makes_young_collections_rarer():
    code = ("import gc; from torchwork.serve.heap import settle_heap; gc.set_threshold(700, 10, 10); "
            "settle_heap(); first = gc.get_threshold(); gc.set_threshold(50000, 5, 5); settle_heap(); "
            "print(first, gc.get_threshold(), gc.get_freeze_count() > 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(SRC)}, check=True).stdout.split("\n")[0]
    # raised to 20,000, never lowered; the generations above keep their setting
    assert out == "(20000, 10, 10) (50000, 5, 5) True"
