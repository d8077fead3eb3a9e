"""Each test leaves the process as it found it, or fails: the pattern of Lightning's test suite (its conftest
fails a test that leaks an environment variable or a thread), extended to what our tests can leak.

Checked after every test, against a snapshot taken before it (after the wider fixtures it uses were set up,
so a session's server is part of the snapshot): environment variables, Python threads, child processes,
listening ports, files written into the repository, and torch's default dtype, grad mode and deterministic
switch. Threads, processes and ports get a
short grace to wind down (a server stopping) before they count as leaked.

Each test process gets a temporary folder of its own (``TMPDIR``, inherited by the subprocesses a test
starts), removed at the end with whatever the tests, their subprocesses and the libraries left in it.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
GRACE_S = 5.0
_FOLDER = pytest.StashKey[tuple]()
_ROOT = "TORCHWORK_TESTS_TMPROOT"
_THREADS = "torch.get_num_threads()"

# Folders of the repository that tools write and git ignores: pytest's and the type checker's caches, the
# environment, the docs build.
_UNWATCHED = {
    ".git",
    ".venv",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "_build",
    "build",
    "dist",
    ".coverage-data",
}

# Threads that libraries start once per process and keep by design, by name prefix, each with its reason.
_LIBRARY_THREADS = (
    "ThreadPoolExecutor",  # asyncio's default executor and concurrent.futures pools kept by libraries (joined at exit)
    "QueueFeederThread",  # multiprocessing queues' feeder, ends with the queue's process
    "asyncio_",  # asyncio's default executor threads (loop.run_in_executor), kept by the loop for reuse
    "Dummy-",  # a thread started by C code that Python only sees (no way to join it)
    "tqdm_monitor",  # tqdm's monitor of its bars, one per process, started with the first bar
)

# Environment variables libraries set on import, by design, once per process.
_LIBRARY_VARIABLES = {
    "KMP_DUPLICATE_LIB_OK",
    "KMP_INIT_AT_FORK",  # Intel OpenMP, loaded by the env tests of two runtimes
    "TOKENIZERS_PARALLELISM",  # tokenizers after a fork
    "CUDA_MODULE_LOADING",  # torch on import
    "TORCHINDUCTOR_CACHE_DIR",  # torch.compile's cache, set on its first use
    "PYTEST_CURRENT_TEST",  # pytest's own
    _ROOT,  # ours, set before the first test
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",  # torch.compile's guards
}
# Set for the whole process by the product on purpose: put back after each test, not a failure.
_SET_BY_DESIGN = (
    "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",  # seed_everything, for subprocesses and deterministic cuBLAS
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",  # pretrained loading switches the hub off: nothing is downloaded
    "OMP_WAIT_POLICY",  # the torchwork command sets PASSIVE when torch is not imported yet (threads.passive_waiting)
)


# Child processes that multiprocessing keeps for the whole session, by a word of their command line.
_LIBRARY_CHILDREN = ("resource_tracker", "forkserver", "compile_worker")


@dataclass
class Snapshot:
    environ: dict[str, str]
    threads: set[int]
    children: set[int]
    ports: set[tuple[str, int]]
    files: set[str]
    torch_state: dict[str, object] = field(default_factory=dict)


@functools.cache
def _command_outputs() -> frozenset[str]:
    """The repository root's entries that .gitignore lists one by one (``/runs/``, ``/graph.html``): what the
    commands the docs show write where a user runs them. Under xdist a docs test writing and removing one
    would be blamed on the test the other worker runs at that moment."""
    ignore = REPOSITORY / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.is_file() else []
    return frozenset(line.strip("/") for line in lines if line.startswith("/"))


def _repository_files() -> set[str]:
    found: set[str] = set()
    skipped = _UNWATCHED | _command_outputs()
    for root, folders, files in os.walk(REPOSITORY):
        top = root == str(REPOSITORY)
        folders[:] = [f for f in folders if f not in _UNWATCHED and not f.endswith(".egg-info")
                      and not (top and f in skipped)]
        relative = os.path.relpath(root, REPOSITORY)
        found.update(os.path.normpath(os.path.join(relative, name)) for name in files
                     if not name.startswith(".coverage") and not (top and name in skipped))
    return found


def _live_children() -> dict[int, str]:
    found: dict[int, str] = {}
    # Direct children only: a process started by a server that a wider fixture owns (a model process
    # replaced at a reload) belongs to that server, and a leaked server is caught as a direct child.
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if not any(word in command for word in _LIBRARY_CHILDREN):
            found[child.pid] = command
    return found


def _listening_ports() -> set[tuple[str, int]]:
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


def _torch_state() -> dict[str, object]:
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    return {
        _THREADS: torch.get_num_threads(),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
    }


def _reset_settings_set_by_design(before: Snapshot) -> None:
    """Put back what the product sets for the whole process on purpose, instead of failing the test: torch's
    thread count (the Trainer's ``threads="auto"`` sets it, to a count that depends on how busy the machine
    is at that moment) and ``PYTHONHASHSEED`` (``seed_everything`` sets it for subprocesses)."""
    torch = sys.modules.get("torch")
    if (
        torch is not None
        and before.torch_state.get(_THREADS, torch.get_num_threads()) != torch.get_num_threads()
    ):
        torch.set_num_threads(before.torch_state[_THREADS])
    for name in _SET_BY_DESIGN:
        if name in before.environ:
            os.environ[name] = before.environ[name]
        else:
            os.environ.pop(name, None)


def _threads() -> dict[int, str]:
    return {
        t.ident: t.name
        for t in threading.enumerate()
        if t.ident is not None and not t.name.startswith(_LIBRARY_THREADS)
    }


def snapshot() -> Snapshot:
    return Snapshot(
        dict(os.environ),
        set(_threads()),
        set(_live_children()),
        _listening_ports(),
        _repository_files(),
        _torch_state(),
    )


def _settled(before: Snapshot) -> tuple[dict[int, str], dict[int, str], set[tuple[str, int]]]:
    """The threads, children and ports the test added, after they were given ``GRACE_S`` to go away."""
    deadline = time.monotonic() + GRACE_S
    while True:
        threads = {ident: name for ident, name in _threads().items() if ident not in before.threads}
        children = {pid: cmd for pid, cmd in _live_children().items() if pid not in before.children}
        ports = _listening_ports() - before.ports
        if not (threads or children or ports) or time.monotonic() > deadline:
            return threads, children, ports
        time.sleep(0.05)


def leaks(before: Snapshot) -> list[str]:
    """What the test left behind, one line each (empty when it left nothing)."""
    found: list[str] = []
    after_environ = dict(os.environ)
    for name in sorted(set(before.environ) | set(after_environ)):
        changed = before.environ.get(name) != after_environ.get(name)
        if changed and name not in _LIBRARY_VARIABLES and name not in _SET_BY_DESIGN:
            found.append(
                f"environment variable {name}: {before.environ.get(name)!r} -> {after_environ.get(name)!r}"
                " (use monkeypatch.setenv)"
            )
    threads, children, ports = _settled(before)
    found += [
        f"thread {name!r} still running (join it, or stop what started it)" for name in threads.values()
    ]
    found += [f"child process {pid} still running: {command[:160]}" for pid, command in children.items()]
    found += [f"port {host}:{port} still listening (stop the server)" for host, port in sorted(ports)]
    torch_state = _torch_state()
    for name, value in torch_state.items():
        if name in before.torch_state and before.torch_state[name] != value and name != _THREADS:
            found.append(f"{name}: {before.torch_state[name]} -> {value} (restore it in a finally block)")
    _reset_settings_set_by_design(before)
    found += [
        f"file {name} written into the repository (use tmp_path)"
        for name in sorted(_repository_files() - before.files)
    ]
    return found


def pytest_configure(config: pytest.Config) -> None:
    """A fresh temporary folder for this test process, set as ``TMPDIR`` before any test runs: short, beside
    the system's (Chromium's socket path must stay under 108 characters), removed at the end."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    root = os.environ.setdefault(_ROOT, tempfile.gettempdir())  # the controller's, inherited by the workers
    folder = tempfile.mkdtemp(prefix=f"tw-{worker}-", dir=root)
    os.chmod(folder, 0o1777)  # as /tmp: the PostgreSQL tests run initdb as the postgres user inside it
    config.stash[_FOLDER] = (os.environ.get("TMPDIR"), folder)
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    if not hasattr(config, "workerinput"):
        # One C++ runner build for the run (the docs and the deploy tests each built their own: about 50 s),
        # kept in the controller's folder, which the xdist workers inherit with the environment.
        os.environ.setdefault("TORCHWORK_CPP_CACHE", os.path.join(folder, "cpp-cache"))
        # What the workers build once for all of them (tests/shared_builds.py), in the same folder.
        os.environ.setdefault("TORCHWORK_TESTS_SHARED", os.path.join(folder, "shared-builds"))
        # One Inductor cache for the run (by default each worker's TMPDIR held its own): the docs page and the
        # deploy tests compile the same digits MLP with AOTInductor, 26 s of CPU cold, 11 s from the cache.
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(folder, "inductor-cache"))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _FOLDER not in config.stash:  # configuring stopped before ours ran (a usage error)
        return
    previous, folder = config.stash[_FOLDER]
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    tempfile.tempdir = None
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _leaves_no_trace() -> Iterator[None]:
    before = snapshot()
    yield
    found = leaks(before)
    if found:
        pytest.fail("the test left the process changed:\n  " + "\n  ".join(found), pytrace=False)
