"""The C++ runner: build ``torchwork-run`` against the libtorch inside the installed torch wheel, and run an
artifact with it (``torchwork verify --cpp``).

The sources live in ``torchwork/deploy/cpp/`` (a CMake project: ``runner.cpp`` loads the ``pt2-aoti`` package
with ``torch::inductor::AOTIModelPackageLoader`` or the TorchScript file with ``torch::jit::load``;
``artifact_check.cpp`` refuses an artifact whose file table's sizes or SHA-256 fail, or that lists a link out
of the artifact, a FIFO or a device, as the Python loader does; ``safetensors_header.cpp`` checks every shape
and offset of an inputs file against its size before a byte is copied). ``torchwork export --cpp`` copies
them into the artifact's ``cpp/`` folder for a deployment machine to build. ``verify --cpp`` never builds the
artifact's copy (it is data, not a command): it builds torchwork's own sources once per (sources, torch,
compiler) in a cache directory and reuses the binary.

The runner reads its inputs from a safetensors file (``input_0``, ``input_1``...; default the artifact's
``examples.safetensors``), writes the outputs to another (``output_0``...), and prints one JSON object:
the outputs' shapes, the load time, and seconds per call at the batch sizes asked for.

Example:
    >>> sorted(SOURCES)  # doctest: +NORMALIZE_WHITESPACE
    ['CMakeLists.txt', 'artifact_check.cpp', 'artifact_check.h', 'runner.cpp', 'safetensors_header.cpp',
     'safetensors_header.h']
    >>> cpp_variant(["onnx", "torchscript", "pt2-aoti"])
    'pt2-aoti'
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError, ExportError

TEMPLATE = Path(__file__).with_name("cpp")
SOURCES = ("CMakeLists.txt", "runner.cpp", "artifact_check.cpp", "artifact_check.h", "safetensors_header.cpp",
           "safetensors_header.h")
ARTIFACT_DIR = "cpp"  # the folder inside an artifact
BINARY = "torchwork-run"
RUNNABLE = ("pt2-aoti", "torchscript")  # the variants the C++ runner loads, in order of preference
REFUSED = 3  # the runner's exit status when the artifact's checksums fail
BUILD_TIMEOUT = 1800
TOOLS = {"cmake": "cmake", "ninja": "ninja-build", "c++": "g++"}  # program -> Debian package


def cpp_variant(variants: Iterable[str]) -> str | None:
    """The variant the C++ runner would load from an artifact holding ``variants``."""
    have = set(variants)
    return next((name for name in RUNNABLE if name in have), None)


def add_cpp_folder(directory: Path) -> list[str]:
    """Copy the runner's sources into ``directory/cpp``; the file names, relative to ``directory``."""
    target = directory / ARTIFACT_DIR
    target.mkdir()
    for name in SOURCES:
        shutil.copyfile(TEMPLATE / name, target / name)
    return [f"{ARTIFACT_DIR}/{name}" for name in SOURCES]


def _tools() -> dict[str, str]:
    found = {program: shutil.which(program) for program in TOOLS}
    missing = [program for program, path in found.items() if path is None]
    if missing:
        packages = " ".join(TOOLS[p] for p in missing)
        raise ConfigError(f"building the C++ runner needs {', '.join(missing)}, not found on PATH. On Debian or "
                          f"Ubuntu: sudo apt-get install {packages}")
    return {program: str(path) for program, path in found.items()}


def cache_root() -> Path:
    """Where built runners are kept: ``$TORCHWORK_CPP_CACHE``, else ``$XDG_CACHE_HOME/torchwork/cpp``."""
    if os.environ.get("TORCHWORK_CPP_CACHE"):
        return Path(os.environ["TORCHWORK_CPP_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "torchwork" / "cpp"


def _build_key(compiler: str) -> str:
    """Sources, torch build and compiler: a binary is reused only when all three are the same."""
    import torch

    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (TEMPLATE / name).read_bytes())
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    for part in (torch.__version__, str(Path(torch.__file__).parent), version.splitlines()[0] if version else ""):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class CppBuild:
    """A built runner: the binary, the seconds its build took (0 when reused) and whether it was reused."""

    binary: Path
    seconds: float
    cached: bool


def build_runner(cache: str | os.PathLike[str] | None = None, jobs: int | None = None,
                 quiet: bool = False) -> CppBuild:
    """Build ``torchwork-run`` (or reuse the one built from the same sources, torch and compiler).

    The build runs in a temporary folder beside the cache entry and is renamed into place when it succeeds,
    so a failed or interrupted build leaves nothing behind; a process that finds another one building the same
    entry waits for it. Ninja's progress lines go to stderr.
    """
    tools = _tools()
    root = Path(cache) if cache is not None else cache_root()
    target = root / _build_key(tools["c++"])
    binary = target / BINARY
    if binary.is_file() and os.access(binary, os.X_OK):
        return CppBuild(binary, 0.0, True)
    root.mkdir(parents=True, exist_ok=True)
    with _building(root / f".{target.name}.lock"):
        if binary.is_file() and os.access(binary, os.X_OK):  # built by the process we waited for
            return CppBuild(binary, 0.0, True)
        return _build_into(target, tools, jobs, quiet)


@contextlib.contextmanager
def _building(lock_path: Path) -> Iterator[None]:
    """One build of an entry at a time: a second process waits for the first one's build instead of compiling
    the same sources beside it (a minute of both cores). The lock goes with the process if it dies."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): concurrent builds stay correct, each renames its own in
        yield
        return
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_into(target: Path, tools: dict[str, str], jobs: int | None, quiet: bool) -> CppBuild:
    import torch.utils

    root, binary = target.parent, target / BINARY
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    started = time.perf_counter()
    try:
        source = work / "src"
        source.mkdir()
        for name in SOURCES:
            shutil.copyfile(TEMPLATE / name, source / name)
        if not quiet:
            print("building the C++ runner against the libtorch in the torch wheel (once per torch version; "
                  "a minute or more)", file=sys.stderr, flush=True)
        _step([tools["cmake"], "-S", str(source), "-B", str(work), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tools['ninja']}",
               f"-DCMAKE_CXX_COMPILER={tools['c++']}", "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"], "cmake (configure)", quiet=True)
        _step([tools["cmake"], "--build", str(work), "-j", str(jobs or os.cpu_count() or 1)], "the build", quiet)
        seconds = time.perf_counter() - started
        shutil.rmtree(source)
        try:
            os.replace(work, target)
        except OSError:  # another process built the same entry meanwhile: keep theirs
            if not binary.is_file():
                raise
        return CppBuild(binary, round(seconds, 1), False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _step(command: Sequence[str], what: str, quiet: bool) -> None:
    lines: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        deadline = time.monotonic() + BUILD_TIMEOUT
        for line in process.stdout:
            lines.append(line.rstrip())
            if not quiet and line.startswith("["):
                print(f"  {line.rstrip()[:120]}", file=sys.stderr, flush=True)
            if time.monotonic() > deadline:
                process.kill()
        code = process.wait()
    if code != 0:
        tail = "\n".join(lines[-15:])
        raise ExportError(f"the C++ runner's {what} failed (exit status {code}):\n{tail}\nThe C++ runner needs the "
                          "libtorch headers of the torch wheel (a CPU or CUDA wheel from pytorch.org) and g++ >= 9.")


def run_cpp(binary: Path, artifact: str | os.PathLike[str], variant: str, inputs: Sequence[Any],
            time_batches: Sequence[int] = (), rounds: int = 10, repeat: int = 5,
            threads: int | None = None, timeout: float = 600) -> tuple[list[Any], dict[str, Any]]:
    """Run ``inputs`` through the artifact with the C++ runner: (outputs, the runner's JSON report).

    Raises :class:`~torchwork.errors.ExportError` when the runner refuses the artifact or fails.
    """
    from torchwork.deploy.tensors import load_tensors, save_tensors

    with tempfile.TemporaryDirectory(prefix="torchwork-cpp-") as scratch:
        feed, result = Path(scratch) / "inputs.safetensors", Path(scratch) / "outputs.safetensors"
        save_tensors(feed, {f"input_{i}": t for i, t in enumerate(inputs)})
        command = [str(binary), os.fspath(artifact), "--variant", variant, "--inputs", str(feed),
                   "--outputs", str(result), "--rounds", str(rounds), "--repeat", str(repeat)]
        if time_batches:
            command += ["--time", ",".join(str(b) for b in time_batches)]
        if threads:
            command += ["--threads", str(threads)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            raise ExportError(f"the C++ runner did not finish in {timeout:g} s on {artifact}.") from error
        message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit status {done.returncode}"
        if done.returncode == REFUSED:
            raise ExportError(f"the C++ runner refused the artifact: {message.removeprefix('torchwork-run: ')}")
        if done.returncode != 0:
            raise ExportError(f"the C++ runner failed on {artifact} [{variant}]: {message}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        tensors = load_tensors(result)
    return [tensors[f"output_{i}"] for i in range(len(tensors))], report


def cpp_row(artifact: Path, variants: Iterable[str], inputs: Sequence[Any], reference_outputs: Sequence[Any],
            reference_row: dict[str, Any], atol: float, rtol: float, rounds: int, threads: int | None,
            static_batch: int | None, cache: str | os.PathLike[str] | None = None,
            targets: Any = None) -> dict[str, Any]:
    """The ``cpp`` row of ``verify``: the C++ runner's outputs against the reference, and its latency at
    batch 1 and throughput at batch 64 (ratios to the reference's Python timings of the same report)."""
    from torchwork.deploy.choice import spread
    from torchwork.deploy.parity import compare

    variant = cpp_variant(variants)
    if variant is None:
        raise ConfigError(f"artifact {artifact} has no variant the C++ runner loads ({' or '.join(RUNNABLE)}): "
                          "export it with --format pt2-aoti (or torchscript).")
    if static_batch:
        raise ConfigError(f"artifact {artifact} has a static batch size ({static_batch}); the C++ runner checks "
                          "artifacts with a dynamic batch (export without --static-batch).")
    build = build_runner(cache)
    outputs, report = run_cpp(build.binary, artifact, variant, inputs, (1, 64), rounds=max(rounds, 3), repeat=10,
                              threads=threads)
    found = compare(reference_outputs, outputs, atol, rtol)
    latency, batch = report["seconds_per_call"]["1"], report["seconds_per_call"]["64"]
    one, many = statistics.median(latency), statistics.median(batch)
    row: dict[str, Any] = {"kind": "exact", "runs": variant, "ok": found["ok"], "problem": found.get("problem"),
                           "max_abs": found["max_abs"], "max_rel": found["max_rel"],
                           "top1_agreement": found["top1_agreement"], "latency_b1_ms": one * 1e3,
                           "throughput_b64_per_s": 64 / many, "throughput_spread": spread(batch) / many,
                           "load_seconds": report["load_seconds"], "build_seconds": build.seconds,
                           "build_cached": build.cached, "binary": str(build.binary)}
    if targets is not None and outputs[0].ndim == 2:
        row["accuracy"] = float((outputs[0].argmax(dim=1) == targets).double().mean())
    if reference_row.get("latency_b1_ms"):
        row["latency_ratio"] = row["latency_b1_ms"] / reference_row["latency_b1_ms"]
    if reference_row.get("throughput_b64_per_s"):
        row["throughput_ratio"] = row["throughput_b64_per_s"] / reference_row["throughput_b64_per_s"]
    return row
