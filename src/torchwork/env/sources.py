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

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;#]+)")
_PYTHON = re.compile(r"^#\s*python(?:\s+version)?\s*[:=]?\s*(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)


def _profile(label: str, kind: str, python: str | None, torch: str | None, build: str | None,
             packages: dict[str, str], openmp: list[str] | None, platform: str | None = None,
             cuda: str | None = None) -> dict[str, Any]:
    return {"label": label, "kind": kind, "python": python, "torch": torch, "build": build, "cuda": cuda,
            "platform": platform, "openmp": openmp, "packages": packages}


def profile_from_lock(text: str, label: str) -> dict[str, Any]:
    """A pip freeze / lock file's pins (``-e`` lines, URLs and options are skipped)."""
    packages: dict[str, str] = {}
    python = None
    for line in text.splitlines():
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
    packages = {canonical_name(k): str(v) for k, v in (snap.get("packages") or {}).items()}
    return _profile(label, kind, snap.get("python"), snap.get("torch"),
                    snap.get("build") or build_from_version(snap.get("torch"), packages), packages,
                    snap.get("openmp"), snap.get("platform"), snap.get("cuda"))


def profile_from_manifest(manifest: dict[str, Any], label: str, kind: str) -> dict[str, Any]:
    """A run or artifact manifest: its ``environment`` snapshot, else what its ``versions`` say."""
    if isinstance(manifest.get("environment"), dict):
        return profile_from_snapshot(manifest["environment"], label, kind)
    versions = manifest.get("versions") or {}
    torch = versions.get("torch")
    cuda = versions.get("cuda")
    build = build_from_version(torch) or (f"cuda {cuda}" if cuda else None)
    packages = {canonical_name(k): str(v) for k, v in versions.items() if k not in ("python", "cuda", "cudnn")
                and v is not None}
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
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        snap = _read_json(path)
        if "torchwork_env" in snap:
            return profile_from_snapshot(snap, label)
        if "torchwork_artifact" in snap or "versions" in snap or "environment" in snap:
            return profile_from_manifest(snap, label, "artifact" if "torchwork_artifact" in snap else "run")
        raise ConfigError(f"{path} is JSON but not a torchwork snapshot or manifest (no 'torchwork_env' key).")
    return profile_from_lock(text, label)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path} is not valid JSON ({error}).") from error
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not a snapshot or manifest object.")
    return data
