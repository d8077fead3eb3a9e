"""Several models in one server, and a new version swapped in with no downtime.

Each served model is a :class:`Slot`: its name, the version serving now (a state with its own batcher, model
process, limits and warm-up), its metrics (kept across versions, labelled ``model="NAME"`` in ``/metrics``
when the server holds more than one model), and how to load another version (``reload``). A reload
(``POST /v2/repository/models/NAME/load`` with ``--enable-model-control``, or SIGHUP):

1. loads and verifies the new version (every file's checksum, as any artifact) and starts its model process,
   while the old version serves;
2. warms it up; any failure so far leaves the old version serving and answers why;
3. switches: one assignment on the event loop, so every request from then on goes to the new version;
4. lets the old version finish what it holds (a request that found the old state keeps it, and its batcher
   drains its queue before it stops), then ends its model process.

Example (``Slot`` needs a started state; what the app does):
    slot = Slot("digits", state, metrics, reload=load_version)
    version = await slot.swap("2", start_state)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.serve.inference_protocol import ProtocolError

logger = logging.getLogger("torchwork.serve")

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

# reload(version or None: the newest) -> (version, predictor, model process or None); blocking, verifies
Loader = Callable[[str | None], tuple[str, Any, Any]]

# The settings each model may have its own of (``--model-limit NAME:SETTING=VALUE``); the rest are the server's.
MODEL_SETTINGS = ("max_batch_size", "max_wait_ms", "max_queue", "max_items", "max_text_length", "max_body_bytes",
                  "timeout_s")

# One version loads at a time, whichever model: torch.export.load is not thread-safe (two at once fail with
# "_CURRENT_DESERIALIZER is already set"), and one load at a time leaves more of the cores to serving.
_LOADING = threading.Lock()


@dataclasses.dataclass
class ModelSpec:
    """One model to serve: ``name`` and ``version`` in the ``/v2`` routes, its ``predictor`` (which declares
    the input), its ``model_process`` (or ``None``: batches on a thread), and ``reload`` to load another
    version (``None``: this model cannot be reloaded)."""

    name: str
    version: str
    predictor: Any
    model_process: Any = None
    reload: Loader | None = None
    newest: Callable[[], str | None] | None = None  # the newest version in the model folder (SIGHUP skips a
    # model already serving it)
    limits: dict[str, Any] = dataclasses.field(default_factory=dict)  # this model's own settings among
    # MODEL_SETTINGS (batch size, payload size, queue...), over the server's
    root: Path | None = None  # the folder a load reads under: a client's error names paths relative to it


def check_name(name: str, what: str = "model name") -> str:
    """``name`` if it is a plain name (letters, digits, ``_``, ``.``, ``-``; not starting with a dot), else a
    :class:`~torchwork.errors.ConfigError`.

    Example:
        >>> check_name("sentiment-v2")
        'sentiment-v2'
    """
    if not NAME.match(name):
        raise ConfigError(f"{what} {name!r}: use letters, digits, '_', '.' and '-' (not first), at most 128")
    return name


def version_key(version: str) -> tuple[int, int | str]:
    """Versions in order: numbers by value, after any non-numeric name (so ``10`` is newer than ``9``)."""
    return (1, int(version)) if version.isdigit() else (0, version)


def versions_in(folder: Path) -> list[str]:
    """The versions of a model folder (``models/NAME/VERSION/manifest.json``), oldest first."""
    found = [child.name for child in folder.iterdir() if child.is_dir() and NAME.match(child.name)
             and (child / "manifest.json").is_file()] if folder.is_dir() else []
    return sorted(found, key=version_key)


def version_folder(root: Path, name: str, version: str | None) -> tuple[str, Path]:
    """The folder of ``name``'s ``version`` (default: the newest) under the model folder ``root``; refuse
    anything outside it (a name or version with a path in it, or a link that leads out) with a
    :class:`ProtocolError` (400), and a version that is not there (404)."""
    for value, what in ((name, "model name"), (version, "version")):
        if value is not None and not NAME.match(value):
            raise ProtocolError(400, f"{what} {value!r} is not a plain name; only versions inside the model "
                                     "folder can be loaded")
    base = root.resolve()
    versions = versions_in(base / name)
    if version is None:
        if not versions:
            raise ProtocolError(404, f"no version of {name!r} in the model folder (want {name}/VERSION/manifest.json "
                                     "in it)")
        version = versions[-1]
    folder = (base / name / version).resolve()
    if base not in folder.parents:
        raise ProtocolError(400, f"{name}/{version} leads outside the model folder; only artifacts inside it can "
                                 "be loaded")
    if version not in versions:
        raise ProtocolError(404, f"model {name!r} has no version {version!r} in the model folder (found {versions})")
    return version, folder


def relative_to(text: str, root: Path | None) -> str:
    """``text`` with every path under ``root`` made relative to it: what a client may see of the server's files.

    Example:
        >>> relative_to("artifact /srv/models/text/2: model.onnx is damaged", Path("/srv/models"))
        'artifact text/2: model.onnx is damaged'
    """
    if root is None:
        return text
    for form in sorted({str(root.resolve()), os.path.abspath(root)}, key=len, reverse=True):
        text = re.sub(re.escape(form) + r"(?:/+|(?![\w.-]))", lambda found: "" if "/" in found.group() else ".",
                      text)
    return text


def manifest_digest(folder: Path) -> str | None:
    """The SHA-256 of ``folder/manifest.json`` (which holds every file's checksum), or None when unreadable:
    missing, not a regular file (a FIFO would block the event loop that asks), or over a manifest's size. It
    is read bounded, so a SIGHUP never hangs on it: the reload that follows says what is wrong."""
    import hashlib

    from torchwork.deploy.manifest import MAX_MANIFEST_BYTES
    from torchwork.paths import read_regular

    try:
        return hashlib.sha256(read_regular(folder / "manifest.json", MAX_MANIFEST_BYTES)).hexdigest()
    except OSError:  # NotRegularFile and FileTooLarge are OSErrors
        return None


class ArtifactFolder:
    """A model served from its own artifact folder (``torchwork serve NAME=ARTIFACT``): a reload reads that
    folder again, verified as at start, and serves it as the next version number (``1``, ``2``, ...).

    Only that folder: a load that names a version is refused (400), as there is no other. ``build(folder)``
    returns (predictor, model process or None). :meth:`newest` tells SIGHUP whether the folder changed since
    it was last loaded (its manifest, which holds every file's checksum, differs), so a SIGHUP that only
    rotates keys reloads nothing.

    Example:
        >>> import tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "manifest.json").write_text("{}")
        >>> source = ArtifactFolder("digits", folder, lambda path: ("predictor", None))
        >>> source.newest(), source.reload(None)[:2]
        ('1', ('2', 'predictor'))
    """

    def __init__(self, name: str, folder: Path, build: Callable[[Path], tuple[Any, Any]]) -> None:
        self.name, self.folder, self.build = name, folder, build
        self.loaded, self.digest = 1, manifest_digest(folder)

    def reload(self, version: str | None) -> tuple[str, Any, Any]:
        """Load the folder again (blocking; verifies every file); the version it will serve as."""
        if version is not None:
            raise ProtocolError(400, f"model {self.name!r} is served from its artifact folder {self.folder}, which "
                                     "holds one version: send no version to load that folder again (replace its "
                                     "files first), or serve a model folder models/NAME/VERSION/ to pick versions")
        digest = manifest_digest(self.folder)
        predictor, process = self.build(self.folder)
        self.loaded, self.digest = self.loaded + 1, digest
        return str(self.loaded), predictor, process

    def newest(self) -> str | None:
        """The version last loaded while the folder is unchanged since; None (load it) once it changed or its
        manifest cannot be read (the load then says why)."""
        digest = manifest_digest(self.folder)
        return str(self.loaded) if digest is not None and digest == self.digest else None


class Slot:
    """One served model: the state serving now, its metrics across versions, how to load another version."""

    def __init__(self, name: str, state: Any, metrics: Any, reload: Loader | None = None,
                 newest: Callable[[], str | None] | None = None, root: Path | None = None) -> None:
        self.name, self.state, self.metrics, self.reload, self.newest = name, state, metrics, reload, newest
        self.root = root  # the folder loads read under; a client's error names paths relative to it
        self.in_flight = 0
        self.loading: str | None = None  # the version being loaded, while it is
        self._lock = asyncio.Lock()
        self.retiring: set[asyncio.Task[Any]] = set()  # old versions finishing their requests

    async def swap(self, version: str | None, start: Callable[[str, Any, Any], Awaitable[Any]],
                   timeout_s: float) -> str:
        """Load ``version`` (default: the newest), start and warm it with ``start(version, predictor,
        process) -> state``, switch to it, and retire the old state; return the version now serving.
        Raise :class:`ProtocolError` (400, 409) with the reason when the old version keeps serving."""
        if self.reload is None:
            raise ProtocolError(400, f"model {self.name!r} was built in this program, not read from an artifact "
                                     "folder, so there is nothing to load it again from")
        if self._lock.locked():
            raise ProtocolError(409, f"model {self.name!r} is loading version {self.loading} already; retry once "
                                     "it is done")
        async with self._lock:
            loop = asyncio.get_running_loop()
            old = self.state
            try:
                self.loading = version or "newest"
                found, predictor, process = await loop.run_in_executor(None, _locked, self.reload, version)
                self.loading = found
                new = await start(found, predictor, process)
            except ProtocolError as problem:
                raise ProtocolError(problem.status, relative_to(str(problem), self.root)) from None
            except Exception as error:  # the artifact, its checksums, the model process: say which
                logger.error("model %s: version %s failed to load; version %s keeps serving: %s", self.name,
                             version or "newest", old.v2.version, error)  # the operator's log: whole paths
                raise ProtocolError(400, f"model {self.name!r} version {version or 'newest'} failed to load: "
                                         f"{type(error).__name__}: {relative_to(str(error), self.root)}. Version "
                                         f"{old.v2.version} keeps serving.") from None
            finally:
                self.loading = None
            self.state = new  # the switch: every request from here on finds the new version
            task = asyncio.ensure_future(old.batcher.shutdown(timeout_s))  # drains what the old one holds
            self.retiring.add(task)
            task.add_done_callback(self.retiring.discard)
            logger.warning("model %s: version %s serves now (was %s)", self.name, found, old.v2.version)
            return found


def _locked(reload: Loader, version: str | None) -> tuple[str, Any, Any]:
    with _LOADING:
        return reload(version)
