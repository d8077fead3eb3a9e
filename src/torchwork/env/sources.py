"""What ``torchwork env diff`` compares: any of four inputs read into one profile.

- a snapshot (``torchwork env --json > snap.json``, or the ``environment`` of a manifest);
- a lock file of ``name==version`` lines (``pip freeze``, ``torchwork env lock``); ``pip freeze`` carries
  no Python version, so it is read from a ``# python: X.Y.Z`` header line as ``torchwork env lock`` writes
  it (unknown without one);
- a run folder (its ``manifest.json``: the ``environment`` snapshot, else the older ``versions``);
- an artifact directory (its ``manifest.json``, the same way).

Example:
    >>> from torchwork.env.sources import profile_from_lock
    >>> p = profile_from_lock("# python: 3.10.12\\ntorch==1.13.1+cu117\\nnumpy==1.24.4\\n", "a.txt")
    >>> p["python"], p["torch"], p["build"], p["packages"]["numpy"]
    ('3.10.12', '1.13.1+cu117', 'cuda 11.7', '1.24.4')
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from torchwork.env.versions import build_from_version, canonical_name
from torchwork.errors import ConfigError

# No two quantifiers here can match the same characters in turn (``\s*`` then an optional group that starts
# with ``[`` and owns the spaces after it, then ``=``), so a line of spaces costs linear time, never quadratic.
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\]\s*)?===?\s*([^\s;#]+)")
_PYTHON = re.compile(r"^#\s*python(?:\s+version)?\s*(?:[:=]\s*)?(\d{1,9}\.\d{1,9}(?:\.\d{1,9})?)(?!\d)",
                     re.IGNORECASE)
MAX_LINE_CHARS = 4096  # a pin with a URL and hashes fits; a longer line is not a lock line
MAX_INPUT_BYTES = 32 << 20  # a lock file, snapshot or manifest
MAX_TEXT_CHARS = 256  # a version, build or platform string
_BUILD = re.compile(r"^(cpu|cuda|rocm)(?: \d{1,4}(?:\.\d{1,4}){0,2})?$")


def _profile(label: str, kind: str, python: Any, torch: Any, build: Any, packages: Any, openmp: Any,
             platform: Any = None, cuda: Any = None) -> dict[str, Any]:
    """The profile, every field checked: a string (or None) of sane length, packages a ``{name: version}`` of
    strings, ``openmp`` a list of strings; anything else is a :class:`ConfigError` naming the field."""
    fields = {"python": python, "torch": torch, "build": build, "cuda": cuda, "platform": platform}
    checked = {name: _text(value, name, label) for name, value in fields.items()}
    if checked["build"] is not None and not _BUILD.match(checked["build"]):
        raise ConfigError(f"{label}: build {checked['build']!r} is not 'cpu', 'cuda X.Y' or 'rocm X.Y'.")
    if not isinstance(packages, dict):
        raise ConfigError(f"{label}: packages is a JSON {_kind(packages)}, not an object of name: version.")
    pins = {canonical_name(_text(name, "a package name", label) or ""): _text(version, f"package {name[:40]!r}",
                                                                              label) or ""
            for name, version in packages.items()}
    if openmp is not None and not (isinstance(openmp, list) and all(isinstance(n, str) for n in openmp)):
        raise ConfigError(f"{label}: openmp is a JSON {_kind(openmp)}, not a list of library file names.")
    return {"label": label, "kind": kind, **checked, "openmp": openmp, "packages": pins}


def _text(value: Any, name: str, label: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{label}: {name} is a JSON {_kind(value)} ({str(value)[:40]}), not a string.")
    if len(value) > MAX_TEXT_CHARS:
        raise ConfigError(f"{label}: {name} is {len(value)} characters long ({value[:24]!r}...); a version or "
                          f"build string has at most {MAX_TEXT_CHARS}.")
    return value


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def profile_from_lock(text: str, label: str) -> dict[str, Any]:
    """A pip freeze / lock file's pins (``-e`` lines, URLs and options are skipped)."""
    packages: dict[str, str] = {}
    python = None
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_LINE_CHARS:
            raise ConfigError(f"{label}: line {number} holds {len(line)} characters; a lock line has at most "
                              f"{MAX_LINE_CHARS} (name==version, options, hashes). This is not a lock file.")
        found = _PYTHON.match(line)
        if found:
            python = found.group(1)
            continue
        pin = _PIN.match(line)
        if pin and not line.lstrip().startswith("#"):
            packages[canonical_name(pin.group(1))] = pin.group(2)
    if not packages:
        raise ConfigError(f"{label} has no 'name==version' lines: pass a lock file (pip freeze, torchwork env "
                          "lock), a snapshot (torchwork env --json), a run folder or an artifact directory.")
    torch = packages.get("torch")
    return _profile(label, "lock file", python, torch, build_from_version(torch, packages), packages, None)


def profile_from_snapshot(snap: dict[str, Any], label: str, kind: str = "snapshot") -> dict[str, Any]:
    packages = snap.get("packages") or {}
    torch = snap.get("torch")
    build = snap.get("build") or (build_from_version(torch, packages) if isinstance(torch, str)
                                  and isinstance(packages, dict) else None)
    return _profile(label, kind, snap.get("python"), torch, build, packages, snap.get("openmp"),
                    snap.get("platform"), snap.get("cuda"))


def profile_from_manifest(manifest: dict[str, Any], label: str, kind: str) -> dict[str, Any]:
    """A run or artifact manifest: its ``environment`` snapshot, else what its ``versions`` say."""
    if isinstance(manifest.get("environment"), dict):
        return profile_from_snapshot(manifest["environment"], label, kind)
    if manifest.get("environment") is not None:
        raise ConfigError(f"{label}: the manifest's environment is a JSON {_kind(manifest['environment'])}, "
                          "not a snapshot object.")
    versions = manifest.get("versions") or {}
    if not isinstance(versions, dict):
        raise ConfigError(f"{label}: the manifest's versions is a JSON {_kind(versions)}, not an object.")
    torch = _text(versions.get("torch"), "torch", label)
    cuda = _text(versions.get("cuda"), "cuda", label)
    build = build_from_version(torch) or (f"cuda {cuda}" if cuda else None)
    packages = {k: v for k, v in versions.items() if k not in ("python", "cuda", "cudnn") and v is not None}
    return _profile(label, kind, versions.get("python"), torch, build, packages, None, None, cuda)


def load_profile(source: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a snapshot, lock file, run folder or artifact directory (decided by what the path holds)."""
    path = Path(source)
    label = str(source)
    if path.is_dir():
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise ConfigError(f"{path} is a directory without manifest.json: pass a run folder "
                              "(RUN_DIR/<timestamp>-<id>) or an artifact directory.")
        manifest = _read_json(manifest_path)
        kind = "artifact" if "torchwork_artifact" in manifest else "run"
        return profile_from_manifest(manifest, label, kind)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: pass a snapshot, a lock file, a run folder or an artifact "
                          "directory.")
    _check_size(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith(("{", "[")) or text.strip() in ("NaN", "Infinity", "-Infinity"):
        snap = _read_json(path)
        if "torchwork_env" in snap:
            return profile_from_snapshot(snap, label)
        if "torchwork_artifact" in snap or "versions" in snap or "environment" in snap:
            return profile_from_manifest(snap, label, "artifact" if "torchwork_artifact" in snap else "run")
        raise ConfigError(f"{path} is JSON but not a torchwork snapshot or manifest (no 'torchwork_env' key).")
    return profile_from_lock(text, label)


def _check_size(path: Path) -> None:
    size = path.stat().st_size
    if size > MAX_INPUT_BYTES:
        raise ConfigError(f"{path} holds {size} bytes; a lock file, snapshot or manifest has at most "
                          f"{MAX_INPUT_BYTES}.")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _read_json(path: Path) -> dict[str, Any]:
    _check_size(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise ConfigError(f"{path} is not valid JSON ({str(error)[:200]}).") from None
    except RecursionError:
        raise ConfigError(f"{path} nests JSON arrays or objects too deeply to be a snapshot or manifest.") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not a snapshot or manifest object.")
    return data
