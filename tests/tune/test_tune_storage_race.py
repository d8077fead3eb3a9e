"""Several processes opening one fresh SQLite study storage at the same moment (the tuner, its workers, a
dashboard or a reader) all get it: the ones that lose the race to create its tables retry, and none fails
with SQLite's "table ... already exists" (seen once in the dashboard test, on a slow 2-core machine)."""

from __future__ import annotations

import subprocess
import sys
import time

OPEN_AT = """
import sys, time
from torchwork.tune.storage import open_storage
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
open_storage("sqlite:///" + sys.argv[1])
print("opened")
"""


def test_processes_opening_a_fresh_storage_at_once_all_get_it(tmp_path) -> None:
    for round_index in range(3):
        database = tmp_path / f"study-{round_index}.db"
        start = time.time() + 4.0  # after every process has imported torchwork and optuna
        processes = [subprocess.Popen([sys.executable, "-c", OPEN_AT, str(database), str(start)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(6)]
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0 and out.strip() == "opened", err[-2000:]
