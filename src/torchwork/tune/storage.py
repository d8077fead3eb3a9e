"""Where a study lives: Optuna's RDB storage, on an embedded SQLite file by default, or on a database server
(``postgresql://...``) for studies run from several machines.

Why SQLite and not Optuna's journal file: the RDB storage has a heartbeat (a trial whose worker stopped
beating is failed by the next worker that looks), the journal file has none. Why no "database is locked"
with many local workers (optuna#820): every transaction starts with ``BEGIN IMMEDIATE``, so a read that is
followed by a write holds the write lock from the start (a deferred transaction that reads and then writes
fails at once, without waiting, when another writer got in between), and the busy timeout then lets writers
queue instead of failing. The file is in WAL mode, so optuna-dashboard reading it during a study neither
blocks the workers nor is blocked by them (optuna-dashboard#545).

Example:
    >>> import pathlib, tempfile
    >>> url = default_url(pathlib.Path(tempfile.mkdtemp()))
    >>> url.startswith("sqlite:///") and url.endswith("study.db")
    True
    >>> describe_url("postgresql://tuner:secret@db:5432/studies")
    'postgresql://tuner:***@db:5432/studies'
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError

BUSY_TIMEOUT_S = 120
HEARTBEAT_S = 5  # a worker records a heartbeat this often; Optuna needs whole seconds
GRACE_S = 30  # a RUNNING trial with no heartbeat for this long is failed (its worker or machine died)


def default_url(study_folder: Path) -> str:
    """The embedded storage of a study: ``sqlite:///<study folder>/study.db``."""
    return f"sqlite:///{(study_folder / 'study.db').resolve()}"


def describe_url(url: str) -> str:
    """The URL with any password hidden (what summaries and errors print): see :mod:`torchwork.masking`."""
    from torchwork.masking import mask_secrets

    return mask_secrets(url)


def sqlite_path(url: str) -> Path | None:
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None


def check_url(url: str) -> None:
    if not url.startswith(("sqlite:///", "postgresql://", "postgresql+psycopg2://", "mysql://", "mysql+")):
        raise ConfigError(f"--storage {describe_url(url)!r}: use postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
                          "(or sqlite:///PATH, the default in the study folder).")


def open_storage(url: str, heartbeat_s: int = HEARTBEAT_S, grace_s: int = GRACE_S,
                 stale_callback: Any = None) -> Any:
    """Optuna's RDB storage on ``url``, with the heartbeat on; a one-line ConfigError when it cannot be
    reached."""
    import warnings

    import optuna
    import sqlalchemy

    check_url(url)
    given = url
    if url.startswith("postgresql://"):
        # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; the driver installed is psycopg2
        url = "postgresql+psycopg2://" + url[len("postgresql://"):]
    path = sqlite_path(url)
    engine_kwargs: dict[str, Any] = {}
    if path is not None:
        if not path.parent.is_dir():
            raise ConfigError(f"storage {describe_url(url)}: the folder {path.parent} does not exist.")
        _prepare_sqlite(path)
        # isolation_level None: the driver sends no BEGIN of its own; _begin_immediate sends ours.
        engine_kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_S, "isolation_level": None}}
    else:
        engine_kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs,
                                                     heartbeat_interval=heartbeat_s, grace_period=grace_s,
                                                     heartbeat_stale_trial_callback=stale_callback)
            break
        except sqlalchemy.exc.SQLAlchemyError as error:
            # two processes creating the tables of a fresh database at once: the loser retries. PostgreSQL says
            # so with a duplicate key (IntegrityError) or 'relation "studies" already exists' (DuplicateTable,
            # a ProgrammingError), SQLite with "table ... already exists" (OperationalError)
            racing = isinstance(error, sqlalchemy.exc.IntegrityError) or "already exists" in str(error)
            if racing and attempt < 4:
                time.sleep(0.5 + attempt)
                continue
            if isinstance(error, sqlalchemy.exc.IntegrityError):
                raise
            raise _unopenable(given, error) from None
        except (ImportError, ValueError) as error:
            raise _unopenable(given, error) from None
    if path is not None:
        sqlalchemy.event.listen(storage.engine, "begin", _begin_immediate)
        storage.engine.dispose()  # connections made before the listener are not reused
    return storage


def _unopenable(url: str, error: BaseException) -> ConfigError:
    reason = describe_url((str(getattr(error, "orig", None) or error).strip().splitlines() or ["unknown"])[0])
    return ConfigError(f"cannot open the study storage {describe_url(url)}: {reason}. Check that the server runs "
                       "and the URL (user, password, host, port, database) is right.")


def _begin_immediate(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _prepare_sqlite(path: Path) -> None:
    """WAL mode (persistent in the file): readers and the writer do not block each other."""
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()
