"""Checkpoints: written atomically with a SHA-256 checksum, loaded with ``weights_only=True``.

A checkpoint ``step-000120.pt`` is a plain ``torch.save`` file; beside it, ``step-000120.pt.sha256`` holds
its checksum and is written just before the checkpoint takes its name: a ``step-*.pt`` that is visible has
its checksum already, so a kill at any moment leaves either no new checkpoint or a whole one. A checkpoint
whose checksum does not match was damaged later and is skipped on resume.

Example:
    >>> import tempfile, pathlib, torch
    >>> from torchwork.runs.checkpoint import save_checkpoint, load_checkpoint
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "step-000001.pt"
    >>> save_checkpoint({"model": {"w": torch.ones(2)}, "format_version": 1}, path)
    >>> load_checkpoint(path)["model"]["w"]
    tensor([1., 1.])
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

# NonFiniteWeightsError lived here before torchwork.errors held every error class: the old path still works.
from torchwork.errors import CheckpointError
from torchwork.errors import NonFiniteWeightsError as NonFiniteWeightsError
from torchwork.files import atomic_write, remove_temp_files
from torchwork.paths import open_regular, read_regular
from torchwork.runs.best_record import MAX_BEST_BYTES

FORMAT_VERSION = 1
_STEP_FILE = re.compile(r"^step-(\d+)\.pt$")
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside DDP / DataParallel (``.module``), ``torch.compile`` (``._orig_mod``) and
    Lightning Fabric's ``_FabricModule`` (``._original_module``)."""
    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, torch.nn.Module):
            model = model._orig_mod
        elif isinstance(getattr(model, "_original_module", None), torch.nn.Module) and model._original_module is not model:
            model = model._original_module
        else:
            return model


def clean_state_dict(state: Mapping[str, Any]) -> dict[str, Any]:
    """Strip ``module.`` / ``_orig_mod.`` prefixes that wrappers add to every key."""
    cleaned = {}
    for key, value in state.items():
        while key.startswith(_WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        cleaned[key] = value
    return cleaned


def non_finite_tensors(state: Mapping[str, Any]) -> list[str]:
    """Names of floating tensors in ``state`` holding NaN or inf."""
    return [name for name, value in state.items()
            if isinstance(value, torch.Tensor) and value.is_floating_point()
            and not bool(torch.isfinite(value).all())]


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def tensor_bytes(state: Any) -> int:
    """The bytes of the tensors' storages in ``state`` (nested dicts, lists and tuples), each storage once, as
    ``torch.save`` writes them: a checkpoint's size, less the pickle and the archive's headers.

    Example:
        >>> w = torch.zeros(2, 3)
        >>> tensor_bytes({"model": {"w": w, "tied": w}, "steps": [torch.zeros(4, dtype=torch.int64)]})
        56
    """
    storages: dict[int, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:  # a sparse tensor has no one storage: its values' bytes
                storages[id(value)] = value._nnz() * value.element_size() if value.is_sparse else 0
                return
            storage = value.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(value, Mapping):
            for item in value.values():
                visit(item)
        elif isinstance(value, list | tuple):
            for item in value:
                visit(item)

    visit(state)
    return sum(storages.values())


class _HashingWriter:
    """The file object ``torch.save`` writes to: each chunk is hashed on its way into ``handle``."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def save_checkpoint(state: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``state`` to ``path`` atomically, then its checksum. Refuses non-finite model weights.

    A full disk raises :class:`~torchwork.errors.DiskFullError` (path, bytes needed, bytes free) before
    anything is replaced; no temp file is left.
    """
    path = Path(path)
    bad = non_finite_tensors(state.get("model", {}))
    if bad:
        raise NonFiniteWeightsError(f"refusing to write {path.name}: weights {bad[:5]} are NaN/inf, and a "
                              "checkpoint of them would poison every resume. Lower the learning rate, clip "
                              "gradients (clip_grad_norm=1.0) or run `torchwork doctor` to find the first "
                              "non-finite value.")
    # Streamed to the file and hashed on the way: written through a buffer it held twice the checkpoint's
    # size in memory (the buffer and its bytes) at each save.
    # The tensors' bytes: a lower bound of the file's size (the pickle and the zip's headers come on top), so
    # the free-space check refuses only what cannot fit; a write that fills the disk fails as well.
    with atomic_write(path, size=tensor_bytes(state)) as handle:
        writer = _HashingWriter(handle)
        torch.save(dict(state), writer)
        # The checksum goes first: killed after it, before the rename, only a checksum without its checkpoint
        # is left (removed on resume), never a checkpoint that looks unfinished.
        _write_checksum(path, writer.digest.hexdigest())


def _write_checksum(path: Path, digest: str) -> None:
    with atomic_write(_checksum_path(path), "w", size=len(digest) + len(path.name) + 3) as handle:
        handle.write(f"{digest}  {path.name}\n")


# A checksum file holds one line: 64 hex digits, two spaces, the checkpoint's name.
MAX_CHECKSUM_BYTES = 4096


def verify_checkpoint(path: str | Path) -> str | None:
    """None when ``path`` matches its checksum, else the reason it does not. Both are read as regular files
    (a FIFO or a link to a device in a run folder is a reason, not a hang)."""
    path = Path(path)
    if not path.exists():
        return "file missing"
    checksum = _checksum_path(path)
    if not checksum.exists():
        return "no checksum file (the write never finished)"
    try:
        recorded = read_regular(checksum, MAX_CHECKSUM_BYTES).decode("ascii", errors="replace").split()
        digest = _sha256_of(path)
    except OSError as error:
        return f"not readable as a checkpoint ({error})"
    expected = recorded[0] if recorded else ""
    if digest != expected:
        return f"checksum mismatch (truncated or corrupt: {path.stat().st_size} bytes)"
    return None


def _sha256_of(path: Path) -> str:
    """The SHA-256 of the regular file ``path``, read in chunks (a checkpoint may be gigabytes)."""
    descriptor = open_regular(path)
    try:
        digest = hashlib.sha256()
        while chunk := os.read(descriptor, 1 << 20):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(descriptor)


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Verify and load a checkpoint with ``torch.load(weights_only=True)`` (no arbitrary unpickling)."""
    path = Path(path)
    problem = verify_checkpoint(path)
    if problem:
        raise CheckpointError(f"checkpoint {path} cannot be used: {problem}.")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # the unpickler raises many types
        raise CheckpointError(f"checkpoint {path} passed its checksum but could not be loaded with "
                              f"weights_only=True: {error}") from error
    version = state.get("format_version") if isinstance(state, dict) else None
    if version is None or version > FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format_version={version!r}; this torchwork reads up "
                              f"to {FORMAT_VERSION}. Upgrade torchwork to load it.")
    return state


def link_checkpoint(source: Path, target: Path) -> None:
    """Make ``target`` the same checkpoint as ``source``: a hard link (no second copy on disk), with its own
    checksum file; a copy where the filesystem has no hard links. Atomic: ``target`` is the old one or the
    new one."""
    import tempfile

    digest = read_regular(_checksum_path(source), MAX_CHECKSUM_BYTES).decode("ascii").split()[0]
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    os.unlink(temporary)
    try:
        os.link(source, temporary)
    except OSError:
        import shutil

        shutil.copyfile(source, temporary)
    try:
        _write_checksum(target, digest)  # before the rename, as in save_checkpoint
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def disk_use(folder: str | Path) -> int:
    """Bytes the files under ``folder`` take, a hard-linked file counted once."""
    seen, total = set(), 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_size
    return total


def remove_leftovers(run: str | Path) -> list[Path]:
    """Remove what interrupted writes left in a run folder: atomic-write temp files, and checksum files
    in ``checkpoints/`` whose checkpoint is gone. Nothing else is touched. Returns what was removed.

    Example:
        >>> import tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp())
        >>> (run / "checkpoints").mkdir()
        >>> (run / "checkpoints" / ".step-000000004.pt.k2j4_x9a.tmp").write_bytes(b"half")
        4
        >>> (run / "checkpoints" / "step-000000002.pt.sha256").write_text("abc  step-000000002.pt")
        22
        >>> sorted(p.name for p in remove_leftovers(run))
        ['.step-000000004.pt.k2j4_x9a.tmp', 'step-000000002.pt.sha256']
    """
    run = Path(run)
    removed = remove_temp_files(run)
    checkpoints = run / "checkpoints"
    if checkpoints.is_dir():
        for checksum in checkpoints.glob("*.pt.sha256"):
            if checksum.is_file() and not checksum.with_name(checksum.name[: -len(".sha256")]).exists():
                checksum.unlink(missing_ok=True)
                removed.append(checksum)
    return removed


class CheckpointManager:
    """Keeps the last ``keep`` step checkpoints of a run, plus ``best.pt`` by a monitored metric."""

    def __init__(self, directory: str | Path, keep: int = 3, monitor: str | None = None, mode: str = "min"):
        if keep < 1:
            from torchwork.errors import ConfigError
            raise ConfigError(f"keep_checkpoints={keep} must be >= 1.")
        self.directory = Path(directory)
        self.keep, self.monitor, self.mode = keep, monitor, mode
        self.best_value: float | None = None
        self._said_not_finite = False

    def step_checkpoints(self) -> list[Path]:
        """Step checkpoints present, oldest first."""
        if not self.directory.exists():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := _STEP_FILE.match(p.name))]
        return [p for _, p in sorted(found)]

    def save(self, state: Mapping[str, Any], step: int, metrics: Mapping[str, Any] | None = None) -> Path | None:
        """Save ``state`` as ``step-<step>.pt``, point ``best.pt`` at it when it is the best (a hard link, not
        a second copy); prune old ones. None if refused. Killed between the two, the resumed run holds the
        best value but not yet its ``best.pt``: :meth:`restore_best` makes it then."""
        path = self.directory / f"step-{step:09d}.pt"
        try:
            save_checkpoint(state, path)
        except NonFiniteWeightsError as error:
            print(f"torchwork: {error}", file=sys.stderr)
            return None
        if self.monitor and metrics and self.monitor in metrics:
            value = float(metrics[self.monitor])
            if self.improves(value):
                self.best_value = value
                self._point_best_at(path, step, value)
            elif not math.isfinite(value) and not self._said_not_finite:
                self._said_not_finite = True  # once a run: every later epoch would say it again
                kept = f"best.pt stays at {self.best_value:.6g}" if self.best_value is not None else \
                    "no best checkpoint yet"
                print(f"torchwork: {self.monitor} is {value} at step {step}: a checkpoint of it is kept but it is "
                      f"never the best ({kept}). When training's loss is finite, look in the evaluation for a log "
                      "or a division by zero (an empty validation set, a class with no rows) or float16 without "
                      "autocast.", file=sys.stderr)
        for old in self.step_checkpoints()[: -self.keep]:
            # checksum first: killed in between, a checkpoint without its checksum is skipped and pruned later
            _checksum_path(old).unlink(missing_ok=True)
            old.unlink(missing_ok=True)
        return path

    def improves(self, value: float) -> bool:
        """Whether ``value`` of the monitored metric beats the best so far. A NaN or inf never does: as the
        first value it would otherwise be the best, and no value after it compares better."""
        if not math.isfinite(value):
            return False
        return self.best_value is None or (value < self.best_value if self.mode == "min" else value > self.best_value)

    def _point_best_at(self, path: Path, step: int, value: float) -> None:
        link_checkpoint(path, self.directory / "best.pt")
        with atomic_write(self.directory / "best.json", "w") as handle:
            json.dump({"monitor": self.monitor, "mode": self.mode, "value": value, "step": step,
                       "from": path.name}, handle)

    def restore_best(self, best_value: float | None, resumed_from: Path, step: int) -> None:
        """On resume: ``best_value`` is what the checkpoint recorded. When ``best.json`` does not say that
        value (a kill after the step checkpoint, before ``best.pt`` pointed at it), the checkpoint resumed
        from is the best one: point ``best.pt`` at it now."""
        self.best_value = best_value if best_value is not None and math.isfinite(best_value) else None
        if self.best_value is None or not resumed_from.name.startswith("step-"):
            return
        try:
            recorded = json.loads(read_regular(self.directory / "best.json", MAX_BEST_BYTES)).get("value")
        except (OSError, ValueError, AttributeError, RecursionError):
            recorded = None
        if recorded != best_value or not (self.directory / "best.pt").exists():
            self._point_best_at(resumed_from, step, self.best_value)

    def newest_valid(self) -> Path | None:
        """The newest step checkpoint that passes its checksum; says which ones it skipped."""
        for path in reversed(self.step_checkpoints()):
            problem = verify_checkpoint(path)
            if problem is None:
                return path
            print(f"torchwork: skipping checkpoint {path.name}: {problem}; falling back to the previous one.",
                  file=sys.stderr)
        return None
