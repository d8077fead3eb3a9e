"""What makes an artifact safe to read: every file is the one exported, nothing on disk is a command.

An artifact is untrusted data. Reading one never unpickles anything (``.pt2`` archives that would are
refused before ``torch.export.load`` sees them), never follows a path out of the directory (names are
checked, then resolved: a symlink that leads out, a FIFO or a device is refused from its ``stat``, before
anything opens it; :mod:`torchwork.paths`), and never imports a module outside the ``torchwork.`` namespace (plus prefixes the caller passes in ``trust``).
A ``.pt2`` program is checked to hold nothing that runs as Python, and to call only the operators a model
needs, before torch reads it (:mod:`torchwork.deploy.pt2_program`).

Two formats are programs rather than data: a ``pt2-aoti`` package is a native library (it runs as code when
loaded) and a TorchScript file is a program (it runs as code when called, and TorchScript can open, read and
write files). :data:`CODE_TRUST` maps each to the word a caller passes in ``trust`` to load it without naming
it; :func:`may_load` is the one rule every loader asks (``load_artifact``, ``verify``, ``torchwork serve``, the
runtime), and the manifest, being data, never makes such a variant the default.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "model.onnx").write_bytes(b"graph")
    5
    >>> file_table(root)["model.onnx"]["bytes"]
    5
    >>> safe_member(root, "../etc/passwd", "the file table")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ExportError: artifact ...: the file table names the path '../etc/passwd', ...
    >>> trust_needed("torchscript"), trust_needed("pt2-aoti"), trust_needed("onnx")
    ('torchscript', 'native', None)
    >>> may_load("torchscript", trust=()), may_load("torchscript", trust=("torchscript",))
    (False, True)
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from torchwork.errors import ExportError
from torchwork.paths import why_unsafe

MANIFEST = "manifest.json"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# ----------------------------------------------------------------------------------------- code in an artifact
NATIVE_TRUST = "native"  # trust=("native",): load a pt2-aoti variant (a native library) without naming it
TORCHSCRIPT_TRUST = "torchscript"  # trust=("torchscript",): load a TorchScript variant without naming it
# format -> the word in ``trust`` that lets it load without being named; a format not here is data
CODE_TRUST: dict[str, str] = {"pt2-aoti": NATIVE_TRUST, "torchscript": TORCHSCRIPT_TRUST}
_RUNS_AS_CODE = {
    "pt2-aoti": "a native shared library, which runs as code when loaded",
    "torchscript": "a TorchScript program, which runs as code when called (TorchScript can open, read and write "
                   "files)",
}


def trust_needed(fmt: str) -> str | None:
    """The word to pass in ``trust`` for a variant of this format to load without being named; None when
    the format is data (ONNX, pt2)."""
    return CODE_TRUST.get(fmt)


def may_load(fmt: str, trust: Iterable[str] = (), named: bool = False) -> bool:
    """Whether a variant of this format may load: it is data, the caller named it, or ``trust`` holds its
    word. The manifest's ``deploy`` field is no consent: it is part of the untrusted artifact."""
    word = trust_needed(fmt)
    return word is None or named or word in tuple(trust)


def package_trust(trust: Iterable[str]) -> tuple[str, ...]:
    """The module prefixes in ``trust`` (for the preprocessor class): everything but the code-trust words."""
    return tuple(t for t in trust if t not in CODE_TRUST.values())


def why_not_loaded(fmt: str) -> str:
    """Why a variant of this format was left unloaded, and how to load it (verify's "not loaded")."""
    word = trust_needed(fmt)
    return (f"{_RUNS_AS_CODE.get(fmt, 'code')}; it loads only when named (--variants {fmt}) or trusted: "
            f"trust=({word!r},) (--trust {word})")


def refuse_untrusted(variant: str, fmt: str, root: Path) -> ExportError:
    """The refusal of a variant that runs as code, asked for neither by name nor by trust."""
    word = trust_needed(fmt)
    return ExportError(f"artifact {root}: variant {variant!r} is {_RUNS_AS_CODE.get(fmt, 'code')}. The file "
                       "table's SHA-256s prove that the files are the ones exported, not who exported them, so "
                       f"load it only from an artifact you trust: name it (load_artifact(dir, {variant!r}), "
                       f"--variant {variant}), pass trust=({word!r},) (--trust {word}), or choose another "
                       "variant.")


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_table(root: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` for every file under ``root`` except the manifest."""
    table = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != MANIFEST:
            table[path.relative_to(root).as_posix()] = {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
    return table


def safe_member(root: Path, relative: Any, what: str, directory: bool = False) -> Path:
    """``root / relative`` after checking that an (untrusted) manifest entry stays inside ``root``: by name,
    then resolved (no symlink out), and that it is a regular file (a directory with ``directory``). A member
    that does not exist passes; the caller says it is missing."""
    if not isinstance(relative, str) or not relative or relative.startswith(("/", "\\")) or ".." in Path(
            relative).parts:
        raise ExportError(f"artifact {root}: {what} names the path {relative!r}, which is not a plain relative "
                          "path inside the artifact. The manifest is damaged or forged: re-export the model.")
    path = root / relative
    check_inside(root, path, relative if what == "the file table" else f"{what} ({relative!r})", directory)
    return path


def check_inside(root: Path, path: Path, name: str, directory: bool = False) -> None:
    """Refuse ``path`` (called ``name`` in the message) unless it resolves inside ``root`` and is a regular
    file (a directory with ``directory``)."""
    problem = why_unsafe(root, path, directory)
    if problem is not None:
        raise ExportError(f"artifact {root}: {name} {problem}; an artifact is read only from its own regular "
                          "files. Re-export the model, or copy the artifact without links (cp -rL).")


def check_file_table(root: Path, files: Mapping[str, Any]) -> None:
    """Every listed file exists with the recorded size and SHA-256."""
    problems = []
    for relative, meta in files.items():
        path = safe_member(root, relative, "the file table")  # refuses links out and special files unread
        if not isinstance(meta, dict):
            problems.append(f"{relative}: no size / checksum recorded")
        elif not path.is_file():
            problems.append(f"{relative}: missing")
        elif path.stat().st_size != meta.get("bytes"):
            problems.append(f"{relative}: {path.stat().st_size} bytes, expected {meta.get('bytes')} "
                            "(truncated or replaced)")
        elif sha256_of(path) != meta.get("sha256"):
            problems.append(f"{relative}: SHA-256 differs from the manifest (the file changed after export)")
    if problems:
        raise ExportError(f"artifact {root} is damaged: " + "; ".join(problems)
                          + ". Re-export the model, or restore the directory from a copy.")


def class_spec(obj: Any) -> str:
    """``"module:Class"`` for an object's class."""
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def in_torchwork(spec: Any) -> bool:
    """Whether a ``"module:Class"`` name is inside the ``torchwork`` namespace (imports nothing)."""
    return isinstance(spec, str) and (spec.startswith("torchwork.") or spec.startswith("torchwork:"))


def resolve_class(spec: Any, trust: Iterable[str] = ()) -> type[Any]:
    """Import ``"module:Class"`` only when the module is ``torchwork`` (or under a trusted prefix).

    The manifest of an artifact is untrusted data: naming ``os:system`` there must not import anything.
    """
    allowed = ("torchwork", *trust)
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ExportError(f"preprocessor class {spec!r} is not of the form 'module:Class'.")
    module_name, class_name = spec.split(":")
    parts = module_name.split(".")
    if not all(_IDENTIFIER.match(p) for p in parts) or not _IDENTIFIER.match(class_name):
        raise ExportError(f"preprocessor class {spec!r} is not a plain 'package.module:Class' name.")
    if not any(module_name == prefix or module_name.startswith(prefix + ".") for prefix in allowed):
        raise ExportError(
            f"the artifact names the preprocessor class {spec!r}, outside the torchwork namespace. An artifact "
            "is untrusted data, so load_artifact imports only torchwork classes. If you wrote that class and "
            f"trust this artifact, pass trust=({parts[0]!r},).")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ExportError(f"cannot import {module_name!r} for the preprocessor {spec!r}: {error}. Install the "
                          "torchwork version the artifact was made with (see manifest 'versions').") from error
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not any(cls.__module__ == p or cls.__module__.startswith(p + ".")
                                            for p in allowed):
        raise ExportError(f"{spec!r} is not a class defined in an allowed namespace {allowed}.")
    if not callable(getattr(cls, "load", None)):
        raise ExportError(f"preprocessor class {spec!r} has no load(directory) classmethod.")
    return cls


def check_pt2_pickle_free(path: Path) -> None:
    """Refuse a .pt2 archive that would make torch.export.load unpickle something.

    torch.export.load unpickles weights / constants flagged ``use_pickle``, custom / opaque objects, legacy
    archives, and falls back to ``weights_only=False`` for sample inputs. A plain exported model has none of
    these, so an archive that has them is refused instead of loaded.
    """
    import torch
    from torch.export.pt2_archive import constants as pt2

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise ExportError(f"{path} is not a readable .pt2 archive ({error}). Re-export the model.") from error
    with archive:
        names = archive.namelist()
        if not any(n.endswith("/" + pt2.ARCHIVE_FORMAT_PATH) or n == pt2.ARCHIVE_FORMAT_PATH for n in names):
            raise ExportError(f"{path} is not a current-format .pt2 archive (no {pt2.ARCHIVE_FORMAT_PATH}); "
                              "older archives load through pickle, so it is refused. Re-export the model.")
        # torch.export.save writes every file under one folder. When the current format fails to load,
        # torch.export.load falls back to the older one, read from the archive's root (``version``,
        # ``serialized_*.pt``) with full pickle: a file outside the folder is refused before that can happen.
        folders = {n.split("/", 1)[0] if "/" in n else None for n in names}
        if len(folders) != 1 or None in folders:
            outside = next((n for n in names if "/" not in n), sorted(f for f in folders if f)[-1])
            raise ExportError(f"{path}: {outside!r} lies outside the archive's one folder; torch.export.load "
                              "would read it as an older-format archive, through pickle, so the archive is "
                              "refused. Re-export the model.")
        for name in names:
            inner = name.split("/", 1)[1] if "/" in name else name
            if inner.startswith((pt2.WEIGHTS_DIR, pt2.CONSTANTS_DIR)) and inner.endswith(".pt"):
                raise ExportError(f"{path}: {name} is a pickled (legacy) weights file; refused.")
            if inner.startswith((pt2.WEIGHTS_DIR, pt2.CONSTANTS_DIR)) and inner.endswith("_config.json"):
                config = json.loads(archive.read(name)).get("config", {})
                for fqn, meta in config.items():
                    pickled = meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(
                        (pt2.WEIGHT_FILENAME_PREFIX, pt2.TENSOR_CONSTANT_FILENAME_PREFIX))
                    if pickled:
                        raise ExportError(f"{path}: {fqn!r} is stored as a pickled object; loading it would run "
                                          "pickle on untrusted data, so the archive is refused.")
            if inner.startswith(pt2.SAMPLE_INPUTS_DIR) and inner.endswith(".pt"):
                try:
                    torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                except Exception as error:
                    raise ExportError(f"{path}: the sample inputs ({name}) need full pickle to load; refused."
                                      ) from error
