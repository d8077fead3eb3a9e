"""A real PostgreSQL server for the tests: initdb in a temporary folder, started with pg_ctl on a free loopback
port (as the ``postgres`` user when we are root: the server refuses to run as root), stopped at teardown."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def postgres_server(database: str = "studies") -> Iterator[str]:
    """A running server with ``database``; yields its URL (user ``tuner``, trusted on loopback)."""
    bin_dir = binaries()
    assert bin_dir is not None
    user = None
    if os.geteuid() == 0:
        user = "postgres" if _exists("postgres") else "nobody"
    root = Path(tempfile.mkdtemp(prefix="torchwork-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if user is not None:
        for path in (root, sockets):
            shutil.chown(path, user)
    run = {"user": user, "capture_output": True, "text": True, "timeout": 120}
    port = _free_port()
    try:
        done = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "tuner", "--auth=trust",
                               "--no-sync"], **run)
        assert done.returncode == 0, done.stderr
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
        done = subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"),
                               "-w", "start"], **run)
        assert done.returncode == 0, done.stderr + (root / "log").read_text()
        yield create_database(f"postgresql://tuner@127.0.0.1:{port}/postgres", database)
    finally:
        subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], **run)
        shutil.rmtree(root, ignore_errors=True)


def create_database(url: str, name: str) -> str:
    """A new, empty database on the server of ``url`` (any database's URL on it); returns its URL."""
    bin_dir = binaries()
    assert bin_dir is not None
    server = url.rsplit("/", 1)[0]
    port = server.rsplit(":", 1)[1]
    done = subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", port, "-U", "tuner", name],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return f"{server}/{name}"


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
