"""Every OpenMP and BLAS library loaded in this process: its file, version, and the distribution that ships it.

Three sources, joined on the real path of each file: the process's mapped files (``/proc/self/maps`` on
Linux: everything ``dlopen`` brought in, including a runtime that another package loaded behind torch's
back), threadpoolctl (versions and thread counts of the runtimes it knows), and the installed
distributions' file lists (``importlib.metadata``: which wheel put the file on disk).

Example:
    >>> from torchwork.env.libraries import runtime_of
    >>> runtime_of("/site-packages/torch/lib/libgomp.so.1"), runtime_of("/x/libopenblas64_p-r0-0cf96a72.3.23.so")
    (('openmp', 'GNU OpenMP (libgomp)'), ('blas', 'OpenBLAS'))
    >>> runtime_of("/usr/lib/libomptarget.so") is None
    True
"""

from __future__ import annotations

import csv
import functools
import importlib.metadata as metadata
import os
import re
from collections.abc import Iterable
from typing import Any

# (pattern on the file name, kind, runtime). A pattern must not match a neighbour (libomptarget is no libomp).
_RUNTIMES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), kind, name) for pattern, kind, name in (
        (r"^libgomp[-.]", "openmp", "GNU OpenMP (libgomp)"),
        (r"^libiomp5?(md)?[-.]", "openmp", "Intel OpenMP (libiomp5)"),
        (r"^lib(omp|omp5)[-.]", "openmp", "LLVM OpenMP (libomp)"),
        (r"^vcomp\d*\.dll$", "openmp", "Microsoft OpenMP (vcomp)"),
        (r"^lib(scipy_)?openblas", "blas", "OpenBLAS"),
        (r"^libmkl_(rt|core|intel_lp64|intel_ilp64)[-.]", "blas", "Intel MKL"),
        (r"^libblis[-.]", "blas", "BLIS"),
        (r"^libflexiblas[-.]", "blas", "FlexiBLAS"),
        (r"^libarmpl", "blas", "Arm Performance Libraries"),
        (r"^libc?blas[-.]", "blas", "reference BLAS"),
    ))


def runtime_of(path: str) -> tuple[str, str] | None:
    """``(kind, runtime)`` for an OpenMP or BLAS library file, else None."""
    name = os.path.basename(path)
    for pattern, kind, runtime in _RUNTIMES:
        if pattern.search(name):
            return kind, runtime
    return None


def mapped_files() -> list[str]:
    """Shared libraries mapped into this process (Linux: ``/proc/self/maps``; elsewhere an empty list)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError:
        return []
    found = dict.fromkeys(parts[5].strip() for parts in (line.split(maxsplit=5) for line in lines)
                          if len(parts) == 6 and ".so" in parts[5])
    return [path for path in found if not path.endswith("(deleted)")]


def _threadpool_info() -> list[dict[str, Any]]:
    # Importing threadpoolctl sets KMP_DUPLICATE_LIB_OK=True in os.environ (and so in every child process):
    # the very setting `torchwork env` warns about. Put the environment back as it was.
    before = os.environ.get("KMP_DUPLICATE_LIB_OK")
    try:
        from threadpoolctl import threadpool_info

        return list(threadpool_info())
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency; mapped files still work
        return []
    finally:
        if before is None:
            os.environ.pop("KMP_DUPLICATE_LIB_OK", None)
        else:
            os.environ["KMP_DUPLICATE_LIB_OK"] = before


@functools.lru_cache(maxsize=1)
def _file_lists() -> tuple[tuple[str, Any], ...]:
    """(RECORD text, distribution) of every installed distribution, read once (metadata is parsed only for
    the few that list a wanted file: parsing all of it costs more than the rest of the report)."""
    rows = []
    for dist in metadata.distributions():
        rows.append((dist.read_text("RECORD") or dist.read_text("installed-files.txt") or "", dist))
    return tuple(rows)


def owners(paths: Iterable[str]) -> dict[str, str]:
    """``{real path: "name version"}`` for the files an installed distribution lists; others are left out."""
    wanted = {os.path.realpath(p): os.path.basename(os.path.realpath(p)) for p in paths}
    found: dict[str, str] = {}
    for record, dist in _file_lists():
        basenames = {b for real, b in wanted.items() if real not in found and b in record}
        if not basenames:
            continue
        for row in csv.reader(line for line in record.splitlines() if any(b in line for b in basenames)):
            if not row:
                continue
            real = os.path.realpath(dist.locate_file(row[0]))
            if real in wanted:
                found[real] = f"{dist.metadata['Name']} {dist.version}"
    return found


def runtime_libraries() -> list[dict[str, Any]]:
    """The OpenMP and BLAS libraries loaded in this process, OpenMP first, with path, version and owner.

    Each entry: ``kind`` (openmp / blas), ``runtime``, ``path`` (real path), ``version`` (when the library
    tells threadpoolctl), ``threads``, ``distribution`` ("name version" of the wheel that installed the
    file, or None for a system library).
    """
    entries: dict[str, dict[str, Any]] = {}
    for path in mapped_files():
        kind = runtime_of(path)
        if kind is not None:
            entries.setdefault(os.path.realpath(path), {"kind": kind[0], "runtime": kind[1], "version": None,
                                                        "threads": None})
    for info in _threadpool_info():
        real = os.path.realpath(info["filepath"])
        kind = runtime_of(real) or (info["user_api"], info.get("internal_api", "?"))
        entry = entries.setdefault(real, {"kind": kind[0], "runtime": kind[1], "version": None, "threads": None})
        entry["version"] = info.get("version")
        entry["threads"] = info.get("num_threads")
    owned = owners(entries)
    rows = [{"kind": e["kind"], "runtime": e["runtime"], "path": path, "version": e["version"],
             "threads": e["threads"], "distribution": owned.get(path)} for path, e in entries.items()]
    return sorted(rows, key=lambda r: (r["kind"] != "openmp", r["runtime"], r["path"]))


def openmp_runtimes_fast() -> list[str]:
    """File names of the OpenMP runtimes mapped in this process, without threadpoolctl or file lists.

    Cheap enough for every run manifest (a read of ``/proc/self/maps``).
    """
    return sorted({os.path.basename(p) for p in mapped_files() if (runtime_of(p) or ("",))[0] == "openmp"})
