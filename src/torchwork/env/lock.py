"""``torchwork env lock``: exact pins of every installed distribution, usable as pip constraints.

The header records what pins cannot: the Python version and implementation, the platform, and torch's
build with the index that serves it (``+cpu`` / ``+cu121`` wheels are not on PyPI). ``torchwork env diff``
reads the ``# python:`` line back. Editable installs (a local folder) are listed as comments: a version
pin cannot say which folder.

Example:
    >>> from torchwork.env.lock import lock_text
    >>> text = lock_text()
    >>> text.splitlines()[2].startswith("# python: ")
    True
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import platform
import time
from pathlib import Path

from torchwork.env.versions import build_from_version, canonical_name


def _editable(dist: metadata.Distribution) -> bool:
    """Installed from a local folder: pip's record says so, or the metadata sits in a source tree.

    The second case is a ``NAME.egg-info`` that setuptools leaves beside the sources (``src/``), found first
    when that folder is on ``sys.path`` before site-packages.
    """
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        direct = {}
    if direct.get("dir_info"):
        return True
    where = getattr(dist, "_path", None)  # PathDistribution's folder; other finders have none
    return (isinstance(where, os.PathLike) and str(where).endswith(".egg-info")
            and Path(where).parent.name not in ("site-packages", "dist-packages"))


def torch_index(build: str | None) -> str | None:
    """The PyTorch index serving a build's wheels (``cpu``, ``cu121``, ``rocm6.0``), or None."""
    if not build:
        return None
    family, _, number = build.partition(" ")
    tag = {"cpu": "cpu", "cuda": "cu" + number.replace(".", ""), "rocm": "rocm" + number}.get(family)
    return f"https://download.pytorch.org/whl/{tag}" if tag else None


def lock_text() -> str:
    """The lock file: a header of comments, then one ``name==version`` line per distribution, by name."""
    pins: dict[str, str] = {}
    editable: list[str] = []
    seen: set[str] = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or canonical_name(name) in seen:
            continue  # the first one on sys.path is the one Python imports (an editable one included)
        seen.add(canonical_name(name))
        if _editable(dist):
            editable.append(f"# {name}=={dist.version} is installed from a local folder (editable): not pinned")
            continue
        pins[name] = dist.version
    torch = next((v for n, v in pins.items() if canonical_name(n) == "torch"), None)
    build = build_from_version(torch, pins)
    libc = " ".join(platform.libc_ver()).strip()
    header = [
        "# torchwork env lock: exact pins of every installed distribution, usable as pip constraints:",
        "#   pip install -c THIS_FILE -r requirements.txt" + (f" --extra-index-url {torch_index(build)}"
                                                            if build and torch and "+" in torch else ""),
        f"# python: {platform.python_version()} ({platform.python_implementation()})",
        f"# platform: {platform.system()}-{platform.machine()}" + (f" ({libc})" if libc else ""),
    ]
    if torch:
        header.append(f"# torch: {torch} (build {build or 'unknown'}"
                      + (f"; wheels from {torch_index(build)})" if build else ")"))
    header.append(f"# taken: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    lines = [f"{name}=={version}" for name, version in sorted(pins.items(), key=lambda kv: canonical_name(kv[0]))]
    return "\n".join(header + sorted(editable) + lines) + "\n"
