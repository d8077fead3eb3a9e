"""Several processes opening one fresh study storage at the same moment (the tuner, its workers, a dashboard
or a reader; on PostgreSQL, several machines) all get it: the ones that lose the race to create its tables
retry, and none fails with "table ... already exists" (SQLite, seen once in the dashboard test, on a slow
2-core machine) or 'relation "studies" already exists' (PostgreSQL, seen once in the two-machine test)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from postgres_server import binaries, create_database, postgres_server

OPEN_AT = """
import sys, time
from torchwork.tune.storage import open_storage
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
open_storage(sys.argv[1])
print("opened")
"""
OPEN_NOW = """
import sys
from torchwork.tune.storage import open_storage
print("opening", flush=True)
open_storage(sys.argv[1])
print("opened")
"""
NO_POSTGRES = pytest.mark.skipif(binaries() is None, reason="PostgreSQL is not installed (make system-deps "
                                                            "installs Debian's postgresql)")


def _open_at_once(url: str, processes: int = 6) -> None:
    start = time.time() + 4.0  # after every process has imported torchwork and optuna
    started = [subprocess.Popen([sys.executable, "-c", OPEN_AT, url, str(start)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    for process in started:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0 and out.strip() == "opened", err[-2000:]


@pytest.mark.slow(reason="processes that each import optuna and open a fresh storage at once")
def test_processes_opening_a_fresh_storage_at_once_all_get_it(tmp_path) -> None:
    for round_index in range(3):
        _open_at_once("sqlite:///" + str(tmp_path / f"study-{round_index}.db"))


@pytest.mark.slow(reason="starts PostgreSQL and processes that open a fresh database at once")
@NO_POSTGRES
def test_processes_opening_a_fresh_postgres_database_at_once_all_get_it() -> None:
    with postgres_server() as url:
        for round_index in range(3):
            _open_at_once(create_database(url, f"fresh{round_index}"))
        _loses_the_race_for_the_tables(create_database(url, "raced"))


def _loses_the_race_for_the_tables(url: str) -> None:
    """The race made certain: another machine's transaction creates the tables and commits only after this
    process's own CREATE TABLE waits on it, which then fails with 'relation "studies" already exists'."""
    import sqlalchemy
    from optuna.storages._rdb import models

    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.begin() as other:
            models.BaseModel.metadata.create_all(other)  # not committed yet
            process = subprocess.Popen([sys.executable, "-c", OPEN_NOW, url], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
            assert process.stdout is not None and process.stdout.readline().strip() == "opening"
            time.sleep(3.0)  # its CREATE TABLE studies now waits on the other transaction's lock
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0 and out.strip() == "opened", err[-2000:]
    finally:
        engine.dispose()
